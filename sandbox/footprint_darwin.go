package sandbox

import (
	"fmt"
	"syscall"
	"unsafe"
)

// footprint is process pid's physical memory footprint in bytes, what
// macOS itself charges the process (Activity Monitor's "Memory", the
// figure jetsam acts on): proc_pid_rusage(pid, RUSAGE_INFO_V0)'s
// ri_phys_footprint. libproc's function is called in libSystem the way
// golang.org/x/sys/unix calls every darwin function without cgo: a
// dynamic import, an assembly trampoline (footprint_darwin.s) and the
// runtime's syscall entry.
func footprint(pid int) (int64, error) {
	var ri rusageInfoV0
	_, _, e := syscall_syscall(libc_proc_pid_rusage_trampoline_addr, uintptr(pid), rusageInfoV0Flavor, uintptr(unsafe.Pointer(&ri)))
	if e != 0 {
		return 0, fmt.Errorf("proc_pid_rusage(%d): %w", pid, e)
	}
	return int64(ri.PhysFootprint), nil
}

// rusageInfoV0 is struct rusage_info_v0 of <sys/resource.h>.
type rusageInfoV0 struct {
	UUID             [16]uint8
	UserTime         uint64
	SystemTime       uint64
	PkgIdleWkups     uint64
	InterruptWkups   uint64
	Pageins          uint64
	WiredSize        uint64
	ResidentSize     uint64
	PhysFootprint    uint64
	ProcStartAbstime uint64
	ProcExitAbstime  uint64
}

// rusageInfoV0Flavor is RUSAGE_INFO_V0.
const rusageInfoV0Flavor = 0

// Implemented in the runtime (runtime/sys_darwin.go), as x/sys/unix uses it.
//
//go:linkname syscall_syscall syscall.syscall
func syscall_syscall(fn, a1, a2, a3 uintptr) (r1, r2 uintptr, err syscall.Errno)

var libc_proc_pid_rusage_trampoline_addr uintptr

//go:cgo_import_dynamic libc_proc_pid_rusage proc_pid_rusage "/usr/lib/libSystem.B.dylib"

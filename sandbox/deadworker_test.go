package sandbox

import "testing"

// TestRuntimeFault: a fault inside the Go runtime is told apart from a
// panic, from a fault in other code and from other fatal errors.
func TestRuntimeFault(t *testing.T) {
	for _, tc := range []struct {
		name, stderr, want string
	}{
		{"on a system stack", "SIGSEGV: segmentation violation\nPC=0x439cbd m=0 sigcode=1 addr=0x0\n\ngoroutine 0 gp=0x17547c0 m=0 mp=0x17559a0 [idle]:\nruntime.(*spanQueue).tryDrain(0x400?, 0x0?, 0x0?)\n\t/usr/local/go/src/runtime/mgcmark_greenteagc.go:520 +0x5d\n",
			"runtime.(*spanQueue).tryDrain"},
		{"on a goroutine's stack", "fatal error: unexpected signal during runtime execution\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x2e430]\n\nruntime stack:\nruntime.throw({0x59c4d8?, 0x2a?})\n\t/go/src/runtime/panic.go:1112 +0x54\nruntime.sigpanic()\n\t/go/src/runtime/signal_unix.go:714 +0x29c\nruntime.(*mheap).alloc.func1()\n\t/go/src/runtime/mheap.go:904 +0x8\n",
			"runtime.(*mheap).alloc.func1"},
		{"in other code", "fatal error: unexpected signal during runtime execution\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x2e430]\n\nruntime stack:\nruntime.throw({0x59c4d8?, 0x2a?})\n\t/go/src/runtime/panic.go:1112 +0x54\nruntime.sigpanic()\n\t/go/src/runtime/signal_unix.go:714 +0x29c\ngithub.com/dop251/goja.(*vm).run(0xc000)\n\t/x/vm.go:1 +0x8\n",
			""},
		{"signal in main", "SIGBUS: bus error\nPC=0x1 m=0 sigcode=2 addr=0x0\n\ngoroutine 1 gp=0x1 m=0 mp=0x1 [running]:\nmain.main()\n\t/x/main.go:3 +0x8\n", ""},
		{"a panic", "panic: runtime error: invalid memory address or nil pointer dereference\n[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x48f]\n\ngoroutine 1 [running]:\nruntime.panicmem()\n", ""},
		{"out of memory", "fatal error: runtime: out of memory\n\nruntime stack:\nruntime.throw({0x1, 0x2})\n", ""},
		{"no frame", "SIGSEGV: segmentation violation\n", ""},
		{"empty", "", ""},
	} {
		if got := runtimeFault(tc.stderr); got != tc.want {
			t.Errorf("%s: runtimeFault = %q, want %q", tc.name, got, tc.want)
		}
	}
}

package sandbox

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// memCap is the Job Object a Windows worker runs in: a hard cap on the
// memory the process commits (an allocation past it fails, and the Go
// runtime dies with "out of memory", which reads as phase memory), and
// kill-on-close, so a worker never outlives the daemon that holds the job.
type memCap struct{ job windows.Handle }

const memCapDescription = "Windows Job Object: process memory limit, kill on close"

// capMemory puts the process in a new Job Object limited to limit bytes of
// committed memory. The worker allocates nothing of the snippet's before
// its init request, which is sent after this returns.
func capMemory(pid int, limit int64) (*memCap, error) {
	job, err := windows.CreateJobObject(nil, nil)
	if err != nil {
		return nil, fmt.Errorf("create job object: %w", err)
	}
	var info windows.JOBOBJECT_EXTENDED_LIMIT_INFORMATION
	info.BasicLimitInformation.LimitFlags = windows.JOB_OBJECT_LIMIT_PROCESS_MEMORY | windows.JOB_OBJECT_LIMIT_KILL_ON_JOB_CLOSE
	info.ProcessMemoryLimit = uintptr(limit)
	if _, err := windows.SetInformationJobObject(job, windows.JobObjectExtendedLimitInformation,
		uintptr(unsafe.Pointer(&info)), uint32(unsafe.Sizeof(info))); err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("set job memory limit: %w", err)
	}
	h, err := windows.OpenProcess(windows.PROCESS_SET_QUOTA|windows.PROCESS_TERMINATE, false, uint32(pid))
	if err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("open worker process: %w", err)
	}
	defer windows.CloseHandle(h)
	if err := windows.AssignProcessToJobObject(job, h); err != nil {
		windows.CloseHandle(job)
		return nil, fmt.Errorf("assign worker to its job object: %w", err)
	}
	return &memCap{job: job}, nil
}

// Exceeded: a worker at the job's limit dies by itself ("out of memory"
// on its stderr), so there is nothing to report here.
func (*memCap) Exceeded() bool { return false }

// Close closes the job; a process still in it is killed.
func (c *memCap) Close() error {
	if c == nil {
		return nil
	}
	return windows.CloseHandle(c.job)
}

// Package proc answers whether a process id names a running process, the
// same way on every OS: Unix asks the kernel with signal 0; Windows opens the
// process and reads its exit code, since Go's Signal supports only Kill there
// and an exited process stays openable while anyone holds a handle to it.
package proc

// Alive reports whether pid names a running process. A process this user
// may not inspect (another user's) counts as running.
func Alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	return alive(pid)
}

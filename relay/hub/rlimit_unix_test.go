//go:build unix

package hub

import "syscall"

// raiseFileLimit lifts the soft RLIMIT_NOFILE to the hard limit so the
// connection benchmark is not cut short by descriptors.
func raiseFileLimit() {
	var l syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &l) == nil && l.Cur < l.Max {
		l.Cur = l.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &l)
	}
}

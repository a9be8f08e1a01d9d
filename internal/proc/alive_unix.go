//go:build unix

package proc

import (
	"errors"
	"syscall"
)

func alive(pid int) bool {
	// Signal 0 checks existence without delivering anything; EPERM means
	// it exists but belongs to another user.
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}

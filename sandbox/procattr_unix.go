//go:build unix

package sandbox

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the worker in its own process group, so a Ctrl-C meant
// for the daemon's terminal reaches the daemon, which then stops its
// workers in order.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
}

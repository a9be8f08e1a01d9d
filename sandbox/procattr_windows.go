package sandbox

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/windows"
)

// setProcAttr keeps the worker off any console: its stdio are pipes, and an
// agent without a console (the logon task's, `run --background`) would
// otherwise open a console window for every worker it starts.
func setProcAttr(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{HideWindow: true, CreationFlags: windows.CREATE_NO_WINDOW}
}

package cli

import (
	"os"

	"golang.org/x/sys/windows"
)

// fdIsTerminal: a console handle has a console mode; a pipe or file has not.
func fdIsTerminal(f *os.File) bool {
	var mode uint32
	return windows.GetConsoleMode(windows.Handle(f.Fd()), &mode) == nil
}

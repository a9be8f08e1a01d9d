//go:build !linux && !darwin && !freebsd && !netbsd && !openbsd && !dragonfly && !windows

package cli

import "os"

// fdIsTerminal: without a terminal ioctl, a character device is taken for
// one (this also admits /dev/null, whose empty answer declines).
func fdIsTerminal(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

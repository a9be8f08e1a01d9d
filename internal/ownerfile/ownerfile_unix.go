//go:build !windows

package ownerfile

import (
	"fmt"
	"os"
)

const describe = "mode 0600"

// Fix says what to do about a refused file.
func Fix(path string) string { return "fix with chmod 600 " + path }

// Protect makes the open file readable and writable by its owner only.
func Protect(f *os.File) error {
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("protect %s: %w", f.Name(), err)
	}
	return nil
}

// Check returns a *SharedError if others can read the file at path.
func Check(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return fmt.Errorf("check %s: %w", path, err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return &SharedError{Path: path, Who: fmt.Sprintf("mode %04o", st.Mode().Perm())}
	}
	return nil
}

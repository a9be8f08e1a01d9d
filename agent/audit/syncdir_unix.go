//go:build !windows

package audit

import (
	"errors"
	"fmt"
	"os"
)

// syncDir makes a rename or a new file in dir durable: the directory entry
// is on disk once its directory is fsync'd.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("audit: sync %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil && !errors.Is(err, os.ErrInvalid) {
		return fmt.Errorf("audit: sync %s: %w", dir, err)
	}
	return nil
}

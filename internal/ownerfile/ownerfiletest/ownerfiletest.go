// Package ownerfiletest lets tests expose a file to others the way each OS
// does it (mode 0644; on Windows an inherited-style DACL that lets Everyone
// read), to check that such a file is refused. Tests only.
package ownerfiletest

import (
	"errors"
	"testing"

	"github.com/roomrelay/roomrelay/internal/ownerfile"
)

// Expose makes the file at path readable by others. Where the file system
// keeps no ACLs it cannot (Wine answers success and changes nothing): the
// test is skipped, saying so.
func Expose(t testing.TB, path string) {
	t.Helper()
	if err := expose(path); err != nil {
		t.Fatalf("expose %s: %v", path, err)
	}
	var shared *ownerfile.SharedError
	if err := ownerfile.Check(path); !errors.As(err, &shared) {
		t.Skipf("this file system keeps no ACLs (Wine maps a file's security to its Unix mode and ignores a new DACL), so a file others can read cannot be made here: %v", err)
	}
}

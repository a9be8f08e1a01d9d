package ownerfile_test

import (
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/internal/ownerfile"
	"github.com/roomrelay/roomrelay/internal/ownerfile/ownerfiletest"
)

// TestProtectThenCheck: a protected file passes the check and its owner can
// still use it; exposed to others, it is refused with a *SharedError.
func TestProtectThenCheck(t *testing.T) {
	path := filepath.Join(t.TempDir(), "secret")
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := ownerfile.Protect(f); err != nil {
		t.Fatal(err)
	}
	if err := ownerfile.Check(path); err != nil {
		t.Fatalf("protected file: %v", err)
	}
	// Still usable by its owner.
	if _, err := f.WriteString("x"); err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(path); err != nil || string(b) != "x" {
		t.Fatalf("read back %q, %v", b, err)
	}
	ownerfiletest.Expose(t, path)
	var shared *ownerfile.SharedError
	if err := ownerfile.Check(path); !errors.As(err, &shared) || shared.Path != path || shared.Who == "" {
		t.Fatalf("exposed file: %v, want a SharedError naming who", err)
	}
	t.Logf("refused: %v", shared)
}

package replace

import (
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestRenameOverAnOpenReader: a file another handle has open for reading
// is replaced once the reader closes it (Windows refuses while it is open;
// Unix never does). Before Rename retried, the agent lost its status write
// whenever `roomrelay status` was reading the file (TestConnectHello...
// under Wine: "rename ... status.json: Access denied.").
func TestRenameOverAnOpenReader(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "status.json")
	if err := os.WriteFile(target, []byte("old"), 0o600); err != nil {
		t.Fatal(err)
	}
	tmp := filepath.Join(dir, ".status.tmp")
	if err := os.WriteFile(tmp, []byte("new"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, err := os.Open(target)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { defer close(done); time.Sleep(50 * time.Millisecond); r.Close() }()
	if err := Rename(tmp, target); err != nil {
		t.Fatalf("rename over a file a reader held: %v", err)
	}
	<-done
	if b, err := os.ReadFile(target); err != nil || string(b) != "new" {
		t.Fatalf("after: %q %v", b, err)
	}
}

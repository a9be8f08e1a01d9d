package cli

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// TestTailFile: the last n lines first, then appended lines, and after a
// rotation (the file replaced by a shorter one) the new file from its start.
func TestTailFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "agent.log")
	var b strings.Builder
	for i := range 100 {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	if err := os.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if err := tailFile(context.Background(), &out, path, 3, false, time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if out.String() != "line 97\nline 98\nline 99\n" {
		t.Fatalf("last 3 lines: %q", out.String())
	}

	var follow testutil.SyncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- tailFile(ctx, &follow, path, 1, true, time.Millisecond) }()
	eventually(t, "the last line", func() bool { return follow.String() == "line 99\n" })
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(f, "appended")
	f.Close()
	eventually(t, "the appended line", func() bool { return strings.HasSuffix(follow.String(), "line 99\nappended\n") })
	// Rotation: a new, shorter file under the same name. Not on Windows,
	// which refuses to rename a file another handle (the tail) has open:
	// nothing rotates agent.log there while it is followed.
	if runtime.GOOS != "windows" {
		if err := os.Rename(path, path+".1"); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte("fresh\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the new file's line", func() bool { return strings.HasSuffix(follow.String(), "appended\nfresh\n") })
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	if err := tailFile(context.Background(), &out, filepath.Join(t.TempDir(), "none"), 3, false, time.Millisecond); err == nil ||
		!strings.Contains(err.Error(), "service status") {
		t.Errorf("a missing log: %v", err)
	}
}

// TestLogsAsksTheJournal: on Linux `roomrelay logs` runs journalctl for the
// user unit (the system unit with --system); a fake journalctl on PATH
// records what it was asked.
func TestLogsAsksTheJournal(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the journal is Linux's")
	}
	bin := t.TempDir()
	script := "#!/bin/sh\necho \"journalctl $*\"\n"
	if err := os.WriteFile(filepath.Join(bin, "journalctl"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	code, out, errs := run(t, nil, "logs", "-n", "20")
	if code != ExitOK || strings.TrimSpace(out) != "journalctl --user -u roomrelay.service -n 20 --no-pager -o short-iso" {
		t.Fatalf("logs: %d %q %s", code, out, errs)
	}
	code, out, _ = run(t, nil, "logs", "--system", "-f")
	if code != ExitOK || strings.TrimSpace(out) != "journalctl -u roomrelay.service -n 50 --no-pager -o short-iso -f" {
		t.Fatalf("logs --system -f: %d %q", code, out)
	}
	t.Setenv("PATH", t.TempDir())
	if code, _, errs := run(t, nil, "logs"); code != ExitUnavailable || !strings.Contains(errs, "journalctl not found") {
		t.Fatalf("logs without journalctl: %d %s", code, errs)
	}
}

// eventually is testutil.Eventually: one way to wait in every test package.
var eventually = testutil.Eventually

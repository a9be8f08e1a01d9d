package cli

import (
	"context"
	"database/sql"
	"os"
	"path/filepath"
	"strings"
	"testing"

	_ "modernc.org/sqlite"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestAuditVerifySaysWhatIsMissing: a log whose oldest lines rotation
// removed is not reported "OK" but PARTIAL with the seqs gone; a removed
// log while the dedupe store shows commands ran fails as "no audit log".
func TestAuditVerifySaysWhatIsMissing(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	state := filepath.Join(home, "state")

	// Commands ran (the agent's dedupe store has them), the log is gone.
	if err := mkdirAll(state); err != nil {
		t.Fatal(err)
	}
	db, err := sql.Open("sqlite", filepath.Join(state, agent.DedupeFile))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(`CREATE TABLE commands (id TEXT PRIMARY KEY); INSERT INTO commands VALUES ('c1'), ('c2')`); err != nil {
		t.Fatal(err)
	}
	db.Close()
	code, out, _ := run(t, env, "audit", "verify")
	if code != ExitFailure || !strings.Contains(out, "no audit log, but the agent's dedupe store holds 2 command(s) that ran") {
		t.Fatalf("removed log: %d %s", code, out)
	}
	code, out, _ = run(t, env, "audit", "verify", "--json")
	if code != ExitFailure || !strings.Contains(out, `"no_log":true`) || !strings.Contains(out, `"commands_ran":2`) {
		t.Fatalf("removed log, JSON: %d %s", code, out)
	}

	// Rotation pushed the oldest lines out.
	l, err := audit.Open(filepath.Join(state, daemon.AuditDir), audit.Options{MaxBytes: 2048, Keep: 2, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		if _, err := l.Append(audit.Entry{CommandID: "c", Project: "p", Command: "read_room", Decision: audit.Allowed}); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	code, out, _ = run(t, env, "audit", "verify")
	if code != ExitOK || !strings.Contains(out, "audit log PARTIAL") || !strings.Contains(out, "were rotated away") || strings.Contains(out, "audit log OK") {
		t.Fatalf("rotated log: %d %s", code, out)
	}
	if n, err := agent.RecordedCommands(context.Background(), state); err != nil || n != 2 {
		t.Fatalf("RecordedCommands = %d, %v", n, err)
	}
}

func mkdirAll(dir string) error { return os.MkdirAll(dir, 0o700) }

// TestTablesEscapeControlCharacters: a command name or device name from the
// network cannot clear the screen or forge a row of a human table.
func TestTablesEscapeControlCharacters(t *testing.T) {
	t.Parallel()
	evil := "\x1b[2J\r\nFAKE dev-xxxx online\tx"
	var out strings.Builder
	e := &Env{Stdout: &out}
	printAudit(e, []audit.Entry{{Seq: 1, Project: "p", Room: evil, Command: evil, Decision: audit.Denied}})
	printDevices(e, []hubapi.Device{{ID: "dev-1", Name: evil, Projects: []string{"p"}, Presence: hubapi.Presence{State: "online"}}})
	got := out.String()
	if strings.ContainsAny(got, "\x1b\r") || strings.Count(got, "\n") != 4 || !strings.Contains(got, "⟨U+001B⟩") {
		t.Fatalf("tables print control characters raw:\n%q", got)
	}
}

func TestAdminTokenFile(t *testing.T) {
	t.Parallel()
	f := filepath.Join(t.TempDir(), "tok")
	if err := os.WriteFile(f, []byte("rra_from-file\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if tok, err := readTokenFlag("", f); err != nil || tok != "rra_from-file" {
		t.Fatalf("from file: %q %v", tok, err)
	}
	if _, err := readTokenFlag("x", f); err == nil {
		t.Error("both --admin-token and --admin-token-file accepted")
	}
	if _, err := readTokenFlag("", filepath.Join(t.TempDir(), "missing")); err == nil {
		t.Error("a missing file accepted")
	}
}

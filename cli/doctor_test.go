package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDoctor: on a healthy enrolled device every check passes (warnings
// allowed: no agent or service here); a revoked token fails the hub auth
// check, a hub that is down the TCP check, a damaged audit log its check.
func TestDoctor(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	if code, out, _ := run(t, env, "doctor"); code != ExitNotEnrolled || !strings.Contains(out, "FAIL  config") {
		t.Fatalf("doctor before enrolling: %d\n%s", code, out)
	}
	dc := srv.enroll(t, env, "p1")
	run(t, env, "enable", "p1")
	type report struct {
		OK     bool
		Checks []check
	}
	doctor := func() (int, map[string]check, string) {
		t.Helper()
		code, out, errs := run(t, env, "doctor", "--json", "--timeout", "5s")
		var r report
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("doctor --json: %v\n%s%s", err, out, errs)
		}
		m := map[string]check{}
		for _, c := range r.Checks {
			m[c.Name] = c
		}
		if r.OK != (code == ExitOK) {
			t.Errorf("ok=%v with exit %d", r.OK, code)
		}
		return code, m, out
	}
	code, m, out := doctor()
	if code != ExitOK {
		t.Fatalf("doctor on a healthy device: %d\n%s", code, out)
	}
	for _, name := range []string{"config", "policy", "credentials", "hub dns", "hub tcp", "hub auth", "clock", "audit log"} {
		if m[name].Status != "ok" {
			t.Errorf("%s: %+v", name, m[name])
		}
	}
	if m["agent"].Status != "warn" || !strings.Contains(m["agent"].Fix, "roomrelay start") {
		t.Errorf("agent not running: %+v", m["agent"])
	}

	// A damaged audit log.
	dir := filepath.Join(home, "state", "audit")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "audit.jsonl"), []byte(`{"seq":1,"hash":"nope"}`+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, m, out := doctor(); code != ExitFailure || m["audit log"].Status != "fail" {
		t.Errorf("damaged audit log: %d\n%s", code, out)
	}
	os.RemoveAll(dir)

	if _, err := srv.Revoke(ctx, dc.DeviceID); err != nil {
		t.Fatal(err)
	}
	if code, m, out := doctor(); code != ExitFailure || m["hub auth"].Status != "fail" || !strings.Contains(m["hub auth"].Detail, "revoked") {
		t.Errorf("revoked: %d\n%s", code, out)
	}
	srv.Stop()
	if code, m, out := doctor(); code != ExitFailure || m["hub tcp"].Status != "fail" {
		t.Errorf("hub down: %d\n%s", code, out)
	}
	if code, out, _ := run(t, env, "doctor"); code != ExitFailure || !strings.Contains(out, "FAIL  hub tcp") || !strings.Contains(out, "→ is the hub up?") {
		t.Errorf("human output with the hub down: %d\n%s", code, out)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
)

// hostile is what a hostile hub puts in its texts: clear the screen, retitle
// the terminal, set the clipboard (OSC 52), overwrite the line, forge an ok
// line, reverse the text.
const hostile = "\x1b[2J\x1b]0;pwned\a\x1b]52;c;Y3VybCBldmlsfHNo\a\rok  hub auth\n\u202Eevil"

// hostileDevice enrolls a device in a fresh home by hand, for a hub at hubURL.
func hostileDevice(t *testing.T, hubURL string) (map[string]string, device.Paths) {
	t.Helper()
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	p, err := device.ResolvePaths(home, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	if err := p.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	cfg := &device.Config{Hub: hubURL, DeviceID: "dev_1", Projects: []string{"p1"}, CredentialStore: credstore.KindFile, EnrolledAt: time.Now().Add(-time.Hour)}
	if err := device.SaveConfig(p, cfg); err != nil {
		t.Fatal(err)
	}
	cs, err := credstore.Open(context.Background(), credstore.KindFile, p.Config)
	if err != nil {
		t.Fatal(err)
	}
	if err := cs.Set(context.Background(), "dev_1", "tok"); err != nil {
		t.Fatal(err)
	}
	return env, p
}

// noEscapes fails if out carries a control, bidi or invisible character
// other than newline: what the terminal would act on.
func noEscapes(t *testing.T, what, out string) {
	t.Helper()
	for _, r := range out {
		if r == '\n' {
			continue
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) || r == 0x202e {
			t.Errorf("%s prints U+%04X raw:\n%q", what, r, out)
			return
		}
	}
}

// TestStatusShowsAHostileHubsTextPrintable: the agent's last error (a close
// reason, a reason phrase) and session id come from the hub; `status`, text
// and JSON, shows them with ⟨U+XXXX⟩ markers, never raw (#24 finding 6).
func TestStatusShowsAHostileHubsTextPrintable(t *testing.T) {
	t.Parallel()
	env, p := hostileDevice(t, "http://127.0.0.1:1")
	st := agent.Status{State: agent.StateBackoff, Hub: "http://127.0.0.1:1", DeviceID: "dev_1", SessionID: hostile,
		LastError: "hub closed the connection: " + hostile, LastErrorAt: time.Now(), PID: os.Getpid(), UpdatedAt: time.Now()}
	writeStatus(t, p, st)
	_, out, errs := run(t, env, "status")
	noEscapes(t, "status", out+errs)
	if !strings.Contains(out, "⟨U+001B⟩[2J") {
		t.Errorf("status does not show the escape as a marker:\n%s", out)
	}
	_, out, _ = run(t, env, "status", "--json")
	var r device.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	noEscapes(t, "status --json (decoded)", r.Problem+r.Agent.LastError+r.Agent.SessionID)
}

// TestDoctorShowsAHostileHubsTextPrintable: a hub's JSON error message and
// its HTTP reason phrase reach doctor's checks with markers, in the text
// and in the decoded JSON (#24 finding 6).
func TestDoctorShowsAHostileHubsTextPrintable(t *testing.T) {
	t.Parallel()
	// A 401 whose JSON error code and message are hostile.
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		json.NewEncoder(w).Encode(map[string]any{"error": map[string]string{"code": hostile, "message": hostile}})
	}))
	defer api.Close()
	// A 200 naming another, hostile device id and projects.
	self := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"device_id": hostile, "projects": []string{hostile}, "server_time": time.Now()})
	}))
	defer self.Close()
	for _, hub := range []string{api.URL, self.URL} {
		env, p := hostileDevice(t, hub)
		// A running agent whose last error quotes the hub (doctor's agent check).
		writeStatus(t, p, agent.Status{State: agent.StateBackoff, Hub: hub, DeviceID: "dev_1",
			LastError: "connect to hub: HTTP 502 " + hostile, LastErrorAt: time.Now(), PID: os.Getpid(), UpdatedAt: time.Now()})
		_, out, errs := run(t, env, "doctor", "--timeout", "5s")
		noEscapes(t, "doctor against "+hub, out+errs)
		if !strings.Contains(out, "⟨U+001B⟩") {
			t.Errorf("doctor against %s does not show the hub's text with markers:\n%s", hub, out)
		}
		_, out, _ = run(t, env, "doctor", "--json", "--timeout", "5s")
		var rep struct{ Checks []check }
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("doctor --json: %v\n%s", err, out)
		}
		for _, c := range rep.Checks {
			noEscapes(t, "doctor --json check "+c.Name, c.Detail+c.Fix)
		}
	}
}

// writeStatus writes the status file an agent would have written, raw: what
// an older agent stored, or a file edited by hand.
func writeStatus(t *testing.T, p device.Paths, st agent.Status) {
	t.Helper()
	b, _ := json.Marshal(st)
	if err := os.WriteFile(filepath.Join(p.State, agent.StatusFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
}

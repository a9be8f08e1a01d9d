package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/examples"
)

// TestSnippetArgsIntoHubCall: `snippet args DIR` builds a proposal's
// arguments, key included; `hub call --args -` reads them from stdin and
// `--args @FILE` from a file, and a real agent answers; the same content
// again is the same proposal. `--schema` prints a command's schema.
func TestSnippetArgsIntoHubCall(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	_, env, dc, _ := srv.onlineDevice(t, "propose_room_snippet_app")

	// The snippet as a directory on disk.
	dir := t.TempDir()
	for name, content := range examples.StandupTimer() {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, argsOut, errs := run(t, env, "snippet", "args", dir, "--room", "r1", "--name", "Standup timer")
	if code != ExitOK {
		t.Fatalf("snippet args: %d %s", code, errs)
	}
	var built struct {
		RoomID string `json:"room_id"`
		Files  map[string]string
	}
	if err := json.Unmarshal([]byte(argsOut), &built); err != nil || built.RoomID != "r1" || len(built.Files) != len(examples.StandupTimer()) {
		t.Fatalf("snippet args printed %s (%v)", argsOut, err)
	}
	_, key, _ := run(t, env, "snippet", "key", dir, "--room", "r1", "--name", "Standup timer")
	if !strings.Contains(argsOut, `"idempotency_key":"`+strings.TrimSpace(key)+`"`) {
		t.Fatalf("snippet args has another key than snippet key (%s): %s", key, argsOut)
	}

	call := func(stdin string, args ...string) (int, string, string) {
		t.Helper()
		var out, errb bytes.Buffer
		e := &Env{Stdin: strings.NewReader(stdin), Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
		base := []string{"hub", "call", dc.DeviceID, "propose_room_snippet_app", "--project", "p1", "--hub", srv.URL(), "--admin-token", "rra_t"}
		return Main(ctx, append(base, args...), e), out.String(), errb.String()
	}
	code, out, errs := call(argsOut, "--args", "-")
	var res struct {
		OK     bool
		Result struct {
			ProposalID string `json:"proposal_id"`
			Duplicate  bool
		}
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil || !res.OK || res.Result.ProposalID == "" {
		t.Fatalf("hub call --args -: %d %s %s", code, out, errs)
	}
	file := filepath.Join(t.TempDir(), "args.json")
	if err := os.WriteFile(file, []byte(argsOut), 0o600); err != nil {
		t.Fatal(err)
	}
	first := res.Result.ProposalID
	code, out, errs = call("", "--args", "@"+file)
	if code != ExitOK || json.Unmarshal([]byte(out), &res) != nil || res.Result.ProposalID != first || !res.Result.Duplicate {
		t.Fatalf("hub call --args @file with the same content: %d %s %s; want proposal %s again", code, out, errs, first)
	}
	for _, bad := range []struct{ stdin, arg, want string }{
		{"[1,2]", "-", "not a JSON object"},
		{"", "@" + filepath.Join(dir, "missing.json"), "missing.json: open"}, // the OS words the rest
		{"{", "-", "not a JSON object"},
	} {
		if code, _, errs := call(bad.stdin, "--args", bad.arg); code != ExitUsage || !strings.Contains(errs, bad.want) {
			t.Errorf("--args %s with %q: %d %s", bad.arg, bad.stdin, code, errs)
		}
	}

	code, out, _ = run(t, env, "hub", "call", "--schema", "read_room_app_status")
	if code != ExitOK || !strings.Contains(out, `"instance_id"`) || !json.Valid([]byte(out)) {
		t.Fatalf("hub call --schema: %d %s", code, out)
	}
	if code, _, errs := run(t, env, "hub", "call", "--schema", "rm_rf"); code != ExitUsage || !strings.Contains(errs, "read_room") {
		t.Fatalf("hub call --schema of an unknown command: %d %s", code, errs)
	}
}

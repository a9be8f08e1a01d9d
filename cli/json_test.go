package cli

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// TestJSONShapes runs the local commands with --json on a fresh home and
// checks what docs/json.md promises: one object at the top with its fields,
// no null where a list belongs, times in UTC.
func TestJSONShapes(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ROOMRELAY_HOME": t.TempDir()}
	timer := filepath.Join("..", "examples", "standup-timer")
	for _, setup := range [][]string{
		{"rooms", "create", "--project", "p1", "--name", "Standup", "--id", "r1"},
		{"enable", "p1"},
	} {
		if code, _, errs := run(t, env, setup...); code != ExitOK {
			t.Fatalf("%v: %d %s", setup, code, errs)
		}
	}
	for _, c := range []struct {
		args   []string
		fields []string
	}{
		{[]string{"version", "--json"}, []string{"version", "protocol", "go", "os", "arch", "build"}},
		{[]string{"status", "--json"}, []string{"state", "problem", "fix"}},
		{[]string{"policy", "show", "--json"}, []string{"file", "in_flight", "projects"}},
		{[]string{"rooms", "create", "--project", "p1", "--name", "Other", "--json"}, []string{"id", "project", "name", "created_at"}},
		{[]string{"rooms", "list", "--json"}, []string{"rooms"}},
		{[]string{"rooms", "show", "r1", "--json"}, []string{"room", "apps"}},
		{[]string{"review", "list", "--json"}, []string{"proposals"}},
		{[]string{"snippet", "key", timer, "--room", "r1", "--name", "T", "--json"}, []string{"idempotency_key", "content_hash", "files"}},
		{[]string{"snippet", "args", timer, "--room", "r1", "--name", "T"}, []string{"room_id", "name", "files", "idempotency_key"}},
		{[]string{"audit", "verify", "--json"}, []string{"files", "lines", "problems", "ok"}},
		{[]string{"unenroll", "--json"}, []string{"enrolled"}},
	} {
		_, out, errs := run(t, env, c.args...)
		var top map[string]json.RawMessage
		if err := json.Unmarshal([]byte(out), &top); err != nil {
			t.Errorf("%v: not one JSON object: %v\n%s%s", c.args, err, out, errs)
			continue
		}
		for _, f := range c.fields {
			if _, ok := top[f]; !ok {
				t.Errorf("%v: no field %q in %s", c.args, f, out)
			}
		}
		if strings.Contains(out, ":null") {
			t.Errorf("%v: a null where a list or object belongs: %s", c.args, out)
		}
	}
	// The policy's rate in machine values.
	_, out, _ := run(t, env, "policy", "show", "--json")
	var pol struct {
		Projects []struct {
			Rate struct{ Events, PerSeconds, Burst int } `json:"rate"`
		}
	}
	if err := json.Unmarshal([]byte(out), &pol); err != nil || len(pol.Projects) != 1 || pol.Projects[0].Rate.Events != 120 || pol.Projects[0].Rate.Burst != 30 {
		t.Errorf("policy rate: %s (%v)", out, err)
	}
	if !strings.Contains(out, `"per_seconds":60`) {
		t.Errorf("policy rate has no per_seconds: %s", out)
	}
}

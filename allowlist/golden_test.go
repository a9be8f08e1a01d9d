package allowlist

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// TestGolden parses every testdata/*.policy. A good file's golden holds its
// canonical form (Marshal) and a decision for each "#? PROJECT COMMAND ARGS"
// line in it ("-" for an empty project, or for no args); a bad
// file's golden holds the exact error.
func TestGolden(t *testing.T) {
	inputs, err := filepath.Glob("testdata/*.policy")
	if err != nil || len(inputs) < 10 {
		t.Fatalf("found %d policy files (%v)", len(inputs), err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".policy")
		t.Run(name, func(t *testing.T) {
			data, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			got := render(t, data)
			bad := strings.HasPrefix(name, "bad-")
			if bad != strings.HasPrefix(got, "error: ") {
				t.Errorf("a file named %s must %s parse", name, map[bool]string{true: "not", false: ""}[bad])
			}
			golden := strings.TrimSuffix(in, ".policy") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./allowlist -update to create it)", err)
			}
			if got != string(want) {
				t.Errorf("%s differs from %s:\n--- got\n%s\n--- want\n%s", in, golden, got, want)
			}
		})
	}
}

func render(t *testing.T, data []byte) string {
	p, err := Parse(data)
	if err != nil {
		return "error: " + err.Error() + "\n"
	}
	var b strings.Builder
	b.WriteString("== canonical\n")
	b.Write(p.Marshal())
	b.WriteString("== summary\n")
	sum, _ := json.Marshal(p.Summary())
	b.Write(sum)
	b.WriteString("\n== decisions\n")
	for line := range strings.Lines(string(data)) {
		line = strings.TrimRight(line, "\r\n")
		q, ok := strings.CutPrefix(line, "#? ")
		if !ok {
			continue
		}
		f := strings.SplitN(q, " ", 3)
		if len(f) != 3 {
			t.Fatalf("query %q: want PROJECT COMMAND ARGS", q)
		}
		dash := func(s string) string { return map[bool]string{true: "", false: s}[s == "-"] }
		err := p.Decide(dash(f[0]), f[1], json.RawMessage(dash(f[2])))
		res := "allow"
		if err != nil {
			e, ok := err.(*relay.Error)
			if !ok {
				t.Fatalf("query %q: %T is not a *relay.Error", q, err)
			}
			res = fmt.Sprintf("%s: %s", e.Code, e.Message)
		}
		fmt.Fprintf(&b, "%s\n  -> %s\n", q, res)
	}
	return b.String()
}

// TestRoundTrip: the canonical form parses back to the same policy and is
// a fixed point of Marshal.
func TestRoundTrip(t *testing.T) {
	inputs, _ := filepath.Glob("testdata/*.policy")
	for _, in := range inputs {
		data, _ := os.ReadFile(in)
		p, err := Parse(data)
		if err != nil {
			continue
		}
		out := p.Marshal()
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("%s: canonical form does not parse: %v\n%s", in, err, out)
		}
		if !bytes.Equal(q.Marshal(), out) {
			t.Errorf("%s: Marshal is not a fixed point:\n%s\n---\n%s", in, out, q.Marshal())
		}
		if fmt.Sprint(q.Projects()) != fmt.Sprint(p.Projects()) {
			t.Errorf("%s: round trip changed the policy:\n%v\n%v", in, p.Projects(), q.Projects())
		}
	}
}

// FuzzParse: no input panics; what parses round-trips through Marshal.
func FuzzParse(f *testing.F) {
	inputs, _ := filepath.Glob("testdata/*.policy")
	for _, in := range inputs {
		data, _ := os.ReadFile(in)
		f.Add(data)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			if _, ok := err.(*ParseError); !ok {
				t.Fatalf("error %T is not a *ParseError", err)
			}
			return
		}
		out := p.Marshal()
		q, err := Parse(out)
		if err != nil {
			t.Fatalf("canonical form does not parse: %v\n%s", err, out)
		}
		if !bytes.Equal(q.Marshal(), out) {
			t.Fatalf("round trip differs:\n%s\n---\n%s", out, q.Marshal())
		}
	})
}

package packaging

import (
	"encoding/xml"
	"flag"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./packaging -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("%s differs from %s (run with -update if the change is intended):\n--- got\n%s", name, path, got)
	}
}

// awkward holds every character class the quoting has to survive.
var awkward = Params{
	Exec: "/opt/room relay/bin/roomrelay",
	Args: []string{"run", "--home", `/home/ann/My "Rooms" 100%$HOME\x`},
	Env:  map[string]string{"ROOMRELAY_RUNTIME_DIR": "/usr/share/roomrelay/jsruntime", "B": "a b&<c>"},
}

func TestGolden(t *testing.T) {
	for _, tc := range []struct {
		name   string
		render func() (string, error)
	}{
		{"systemd-user", func() (string, error) {
			return SystemdUserUnit(Params{Exec: "/usr/bin/roomrelay", Args: []string{"run"}})
		}},
		{"systemd-user-home", func() (string, error) { return SystemdUserUnit(awkward) }},
		{"systemd-packaged", func() (string, error) { return PackagedUserUnit(true) }},
		{"systemd-system", func() (string, error) {
			return SystemdSystemUnit(Params{Exec: "/usr/bin/roomrelay", Args: []string{"run", "--home", "/var/lib/roomrelay"}, User: "roomrelay"})
		}},
		{"launchd-agent", func() (string, error) {
			return LaunchdPlist(Params{Exec: "/usr/local/bin/roomrelay", Args: []string{"run"}, LogDir: "/Users/ann/Library/Logs"}, false)
		}},
		{"launchd-agent-home", func() (string, error) {
			p := awkward
			p.LogDir = "/Users/ann/Library/Logs"
			return LaunchdPlist(p, false)
		}},
		{"launchd-daemon", func() (string, error) {
			return LaunchdPlist(Params{Exec: "/usr/local/bin/roomrelay", Args: []string{"run", "--home", "/var/lib/roomrelay"}, User: "_roomrelay", LogDir: "/Library/Logs"}, true)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.render()
			if err != nil {
				t.Fatal(err)
			}
			golden(t, tc.name, got)
		})
	}
}

func TestRefusesUnsafeParams(t *testing.T) {
	for name, p := range map[string]Params{
		"relative exec":     {Exec: "roomrelay", LogDir: "/tmp"},
		"newline in arg":    {Exec: "/usr/bin/roomrelay", Args: []string{"run\nExecStartPre=/bin/evil"}, LogDir: "/tmp"},
		"newline in env":    {Exec: "/usr/bin/roomrelay", Env: map[string]string{"A": "1\n[Service]"}, LogDir: "/tmp"},
		"bad env name":      {Exec: "/usr/bin/roomrelay", Env: map[string]string{"A=B": "1"}, LogDir: "/tmp"},
		"control in logdir": {Exec: "/usr/bin/roomrelay", LogDir: "/tmp/\x00"},
	} {
		if _, err := SystemdUserUnit(p); err == nil {
			t.Errorf("%s: SystemdUserUnit accepted it", name)
		}
		if _, err := LaunchdPlist(p, false); err == nil {
			t.Errorf("%s: LaunchdPlist accepted it", name)
		}
	}
	if _, err := LaunchdPlist(Params{Exec: "/usr/bin/roomrelay"}, false); err == nil || !strings.Contains(err.Error(), "log directory") {
		t.Errorf("plist without a log dir: %v", err)
	}
}

// TestSystemdQuoteRoundTrip unquotes what systemdQuote produced the way
// systemd's command-line parser does and checks the word comes back.
func TestSystemdQuoteRoundTrip(t *testing.T) {
	for _, s := range []string{"run", "a b", `q"uote`, `back\slash`, "100%", "$HOME", "semi;colon", "it's", ""} {
		q := systemdQuote(s, true)
		if got := unquoteSystemd(t, q); got != s {
			t.Errorf("systemdQuote(%q) = %s, which systemd reads as %q", s, q, got)
		}
	}
}

// unquoteSystemd is a minimal model of systemd's ExecStart word parsing:
// %% → %, $$ → $, and one double-quoted word with \\ and \" escapes.
func unquoteSystemd(t *testing.T, q string) string {
	q = strings.ReplaceAll(strings.ReplaceAll(q, "%%", "%"), "$$", "$")
	if !strings.HasPrefix(q, `"`) {
		if strings.ContainsAny(q, " \"\\") {
			t.Fatalf("unquoted word %s holds a special character", q)
		}
		return q
	}
	if len(q) < 2 || !strings.HasSuffix(q, `"`) {
		t.Fatalf("unbalanced quotes in %s", q)
	}
	var b strings.Builder
	in := q[1 : len(q)-1]
	for i := 0; i < len(in); i++ {
		if in[i] == '\\' && i+1 < len(in) {
			i++
		} else if in[i] == '"' {
			t.Fatalf("unescaped quote inside %s", q)
		}
		b.WriteByte(in[i])
	}
	return b.String()
}

// TestPlistIsXML parses every rendered plist: a stray & or < would make
// launchctl refuse the file.
func TestPlistIsXML(t *testing.T) {
	p := awkward
	p.LogDir = "/Users/a&b/Library/Logs"
	out, err := LaunchdPlist(p, true)
	if err != nil {
		t.Fatal(err)
	}
	dec := xml.NewDecoder(strings.NewReader(out))
	dec.Strict = true
	var strs []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("not well-formed XML: %v\n%s", err, out)
		}
		if cd, ok := tok.(xml.CharData); ok && strings.TrimSpace(string(cd)) != "" {
			strs = append(strs, string(cd))
		}
	}
	for _, want := range append([]string{p.Exec, "/Users/a&b/Library/Logs/roomrelay.err.log"}, p.Args...) {
		if !slices.Contains(strs, want) {
			t.Errorf("plist does not carry %q after XML decoding", want)
		}
	}
}

// TestSystemdAnalyzeVerify runs systemd's own checker over the units when it
// is installed (it is on Debian CI images with systemd).
func TestSystemdAnalyzeVerify(t *testing.T) {
	sa, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze not installed; the golden files still pin the units")
	}
	dir := t.TempDir()
	// verify wants ExecStart to exist and be executable.
	exe := filepath.Join(dir, "bin dir", "roomrelay")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	p := awkward
	p.Exec = exe
	for name, render := range map[string]func(Params) (string, error){"user": SystemdUserUnit, "system": SystemdSystemUnit} {
		unit, err := render(p)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name, Name+".service")
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
			t.Fatal(err)
		}
		args := []string{"verify", "--man=no"}
		if name == "user" {
			args = append(args, "--user")
		}
		out, err := exec.Command(sa, append(args, path)...).CombinedOutput()
		// Without a running systemd, verify may fail to connect; only its
		// complaints about our file count.
		for _, line := range strings.Split(string(out), "\n") {
			if strings.Contains(line, Name+".service:") {
				t.Errorf("%s unit: %s", name, line)
			}
		}
		t.Logf("systemd-analyze %s: err=%v\n%s", name, err, out)
	}
}

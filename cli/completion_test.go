package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestBashCompletion sources the generated script in a real bash and asks
// it to complete: command words at each level, and a command's flags.
func TestBashCompletion(t *testing.T) {
	t.Parallel()
	bash, err := exec.LookPath("bash")
	if err != nil {
		t.Skip("no bash")
	}
	code, script, _ := run(t, nil, "completion", "bash")
	if code != ExitOK {
		t.Fatalf("completion bash: %d", code)
	}
	path := filepath.Join(t.TempDir(), "roomrelay.bash")
	if err := os.WriteFile(path, []byte(script), 0o600); err != nil {
		t.Fatal(err)
	}
	complete := func(words ...string) string {
		t.Helper()
		quoted := make([]string, len(words))
		for i, w := range words {
			quoted[i] = "'" + w + "'"
		}
		sh := "source " + path + "; COMP_WORDS=(" + strings.Join(quoted, " ") + "); COMP_CWORD=" + strconv.Itoa(len(words)-1) +
			`; _roomrelay; echo "${COMPREPLY[*]}"`
		out, err := exec.Command(bash, "--norc", "-c", sh).CombinedOutput()
		if err != nil {
			t.Fatalf("bash: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	for _, c := range []struct {
		words []string
		want  string
	}{
		{[]string{"roomrelay", "unen"}, "unenroll"},
		{[]string{"roomrelay", "hub", "t"}, "token"},
		{[]string{"roomrelay", "hub", "token", "re"}, "revoke"},
		{[]string{"roomrelay", "status", "--j"}, "--json"},
		{[]string{"roomrelay", "enable", "p1", "--d"}, "--deny"},
		{[]string{"roomrelay", "review", "approve", "--ho"}, "--home"},
		{[]string{"roomrelay", "hub", "call", "dev-1", "read_room", "--sch"}, "--schema"},
	} {
		if got := complete(c.words...); got != c.want {
			t.Errorf("complete %v: %q, want %q", c.words, got, c.want)
		}
	}
}

// TestManPage renders the generated page with groff, which must not warn,
// and finds every visible command in it.
func TestManPage(t *testing.T) {
	t.Parallel()
	code, page, _ := run(t, nil, "man")
	if code != ExitOK || !strings.HasPrefix(page, ".TH ROOMRELAY 1") {
		t.Fatalf("man: %d %.80q", code, page)
	}
	for _, c := range visible() {
		if !strings.Contains(page, ".B roomrelay "+roff(c.Name)) {
			t.Errorf("no entry for %s", c.Name)
		}
	}
	groff, err := exec.LookPath("groff")
	if err != nil {
		t.Skip("no groff to render the page")
	}
	cmd := exec.Command(groff, "-man", "-Tutf8", "-ww", "-z")
	cmd.Stdin = strings.NewReader(page)
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Fatalf("groff: %v\n%s", err, out)
	}
}

func TestFishCompletionLists(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, nil, "completion", "fish")
	if code != ExitOK || !strings.Contains(out, "-n '__fish_seen_subcommand_from token' -a 'revoke'") ||
		!strings.Contains(out, "-n '__fish_seen_subcommand_from doctor' -l json") {
		t.Fatalf("fish: %d\n%.400s", code, out)
	}
	if fish, err := exec.LookPath("fish"); err == nil {
		cmd := exec.Command(fish, "--no-execute")
		cmd.Stdin = strings.NewReader(out)
		if b, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("fish --no-execute: %v\n%s", err, b)
		}
	}
}

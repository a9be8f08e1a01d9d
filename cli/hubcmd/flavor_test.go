package hubcmd

import (
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
)

// TestBuildFlavor: importing this package makes the full build: version
// says so, the hub and the demo are the real commands with their flags,
// listed, and the hidden worker subcommand is registered (so the sandbox
// pool starts this binary, not roomrelay-sandbox).
func TestBuildFlavor(t *testing.T) {
	code, out, _ := run(t, nil, "version", "--json")
	if code != cli.ExitOK || !strings.Contains(out, `"build":"full"`) {
		t.Fatalf("version --json = %d %s; want build full", code, out)
	}
	_, list, _ := run(t, nil)
	for name, want := range map[string][]string{"hub": {"--listen", "--nats", "--replicas", "--tls-cert"}, "demo": {"--keep", "--no-sandbox"}} {
		code, out, _ := run(t, nil, name, "--help")
		if code != cli.ExitOK || strings.Contains(out, "not in this build") {
			t.Errorf("%s --help = %d %q", name, code, out)
		}
		for _, f := range want {
			if !strings.Contains(out, f) {
				t.Errorf("%s --help lacks %s", name, f)
			}
		}
		if !strings.Contains(list, "\n  "+name+"   ") {
			t.Errorf("%s is not in the command list:\n%s", name, list)
		}
	}
	if code, _, errs := run(t, nil, cli.WorkerCommand, "--help"); code != cli.ExitOK {
		t.Errorf("%s --help = %d %s", cli.WorkerCommand, code, errs)
	}
}

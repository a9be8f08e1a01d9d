package main

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
)

func run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(string) string { return "" }}
	code := cli.Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

// TestNotInThisBuild: the device binary reports the agent build, refuses
// hub and demo with the reason (not "unknown command"), leaves them out of
// the command list, and keeps the admin commands, which only speak HTTP.
func TestNotInThisBuild(t *testing.T) {
	if code, out, _ := run("version", "--json"); code != cli.ExitOK || !strings.Contains(out, `"build":"agent"`) {
		t.Fatalf("version --json = %d %s; want build agent", code, out)
	}
	for _, name := range []string{"hub", "demo"} {
		code, _, stderr := run(name)
		if code != cli.ExitUsage || !strings.Contains(stderr, "not in this build") || !strings.Contains(stderr, "cmd/roomrelay") {
			t.Errorf("%s = %d %q; want exit 2 naming the build", name, code, stderr)
		}
	}
	_, list, _ := run()
	if strings.Contains(list, "\n  hub   ") || strings.Contains(list, "\n  demo   ") || !strings.Contains(list, "hub pair") {
		t.Errorf("command list:\n%s", list)
	}
	if code, _, _ := run(cli.WorkerCommand); code != cli.ExitUsage {
		t.Errorf("%s in the device binary = %d; want unknown command", cli.WorkerCommand, code)
	}
}

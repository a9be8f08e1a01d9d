package hubcmd

import (
	"bytes"
	"context"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
)

// run runs roomrelay (cli's commands and this package's) with args and env,
// and returns the exit code, stdout and stderr.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &cli.Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := cli.Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

//go:build !agentonly

package cli

import (
	"context"
	"errors"
	"flag"

	"github.com/roomrelay/roomrelay/sandbox"
)

// workerCommand is the hidden subcommand a sandbox worker process runs. In
// the full build the worker is this binary; the device build uses the
// separate cmd/roomrelay-sandbox (snippet_worker_agentonly.go).
const workerCommand = "sandbox-worker"

func init() {
	register(&command{
		Name:    workerCommand,
		Summary: "internal: serve sandbox smoke-runs on stdin/stdout",
		Hidden:  true,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			return func(ctx context.Context, args []string) error {
				if code := sandbox.WorkerMain(ctx, e.Stdin, e.Stdout); code != 0 {
					return silent(code)
				}
				return nil
			}
		},
	})
}

// sandboxWorker is the command line that starts a sandbox worker.
func sandboxWorker(e *Env) ([]string, error) {
	if e.Executable == "" {
		return nil, errors.New("cannot start sandbox workers: the path of this binary is unknown")
	}
	return []string{e.Executable, workerCommand}, nil
}

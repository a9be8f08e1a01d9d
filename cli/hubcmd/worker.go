package hubcmd

import (
	"context"
	"flag"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/sandbox/worker"
)

// The full binary links the sandbox's worker side anyway (the demo and the
// hub's tools run beside it), so it is its own sandbox worker: the pool
// starts this hidden subcommand of the running binary. The device binary
// does not register it and starts cmd/roomrelay-sandbox instead.
func init() {
	cli.Register(&cli.Command{
		Name:    cli.WorkerCommand,
		Summary: "internal: serve sandbox smoke-runs on stdin/stdout",
		Hidden:  true,
		Setup: func(fs *flag.FlagSet, e *cli.Env) cli.Runner {
			return func(ctx context.Context, args []string) error {
				if code := worker.Main(ctx, e.Stdin, e.Stdout); code != 0 {
					return silent(code)
				}
				return nil
			}
		},
	})
}

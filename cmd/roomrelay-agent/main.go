// GOMAXPROCS still follows the cgroup CPU limit at start; the runtime's
// once-a-second re-check is off, because it wakes an otherwise idle agent.
//go:debug updatemaxprocs=0

// Command roomrelay-agent is the device binary of roomrelay, what the .deb
// and .rpm install as roomrelay: package cli's commands (the agent, enroll,
// review, the hub admin commands, which only speak HTTP) without cli/hubcmd,
// so it links no nats-server (whose process sampler wakes every process that
// links it once a second), no MCP SDK and no JavaScript engine: its sandbox
// workers are the separate cmd/roomrelay-sandbox. `roomrelay hub` and
// `roomrelay demo` say they are not in this build.
package main

import (
	"context"
	"errors"
	"flag"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomrelay/roomrelay/cli"
)

// notInThisBuild is the hidden stub of a command only the full binary has:
// runnable, to say so, but not listed, completed or in the man page.
func notInThisBuild(name string) *cli.Command {
	return &cli.Command{
		Name:    name,
		Hidden:  true,
		Summary: "not in this build: the device binary leaves the hub and the demo out",
		Setup: func(fs *flag.FlagSet, e *cli.Env) cli.Runner {
			return func(ctx context.Context, args []string) error {
				return &cli.ExitError{Code: cli.ExitUsage, Usage: true, Err: errNotInThisBuild}
			}
		},
	}
}

var errNotInThisBuild = errors.New("not in this build: this is the device binary (cmd/roomrelay-agent), which leaves " +
	"the hub and the demo out; run them from the full binary (go build ./cmd/roomrelay)")

func init() {
	cli.Register(notInThisBuild("hub"))
	cli.Register(notInThisBuild("demo"))
}

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}

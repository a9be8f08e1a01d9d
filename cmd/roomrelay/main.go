// GOMAXPROCS still follows the cgroup CPU limit at start; the runtime's
// once-a-second re-check is off, because it wakes an otherwise idle agent.
//go:debug updatemaxprocs=0

// Command roomrelay is the full roomrelay: the device agent, the cloud hub
// and the demo. All logic lives in package cli; importing cli/hubcmd adds
// the hub server, the demo and the sandbox worker subcommand (and with them
// nats-server, the MCP SDK, esbuild and goja). The packages ship the device
// binary instead, cmd/roomrelay-agent.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomrelay/roomrelay/cli"
	_ "github.com/roomrelay/roomrelay/cli/hubcmd"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}

// GOMAXPROCS still follows the cgroup CPU limit at start; the runtime's
// once-a-second re-check is off, because it wakes an otherwise idle agent.
//go:debug updatemaxprocs=0

// Command roomrelay is the device agent and the cloud hub of roomrelay.
// All logic lives in package cli; this file only connects it to the process.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomrelay/roomrelay/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Main(ctx, os.Args[1:], cli.OSEnv())
	stop()
	os.Exit(code)
}

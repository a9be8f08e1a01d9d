// Command roomrelay-sandbox is the sandbox worker of the device binary: the
// agent (cmd/roomrelay-agent, installed as roomrelay) starts it to bundle
// and smoke-run an approved snippet, so the agent itself links no
// JavaScript engine. It speaks the worker protocol on stdin/stdout and is not
// meant to be run by hand. The packages install it as
// lib/roomrelay/roomrelay-sandbox.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/roomrelay/roomrelay/sandbox/worker"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "roomrelay-sandbox: the sandbox worker of roomrelay; it takes no arguments and is started by the agent (see `roomrelay snippet check --help`)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := worker.Main(ctx, os.Stdin, os.Stdout)
	stop()
	os.Exit(code)
}

package cli

import (
	"context"
	"errors"
	"fmt"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/relay"
)

// liveAgent is a client of the running agent's local API, or nil when no
// agent answers (no discovery file, or a stale one): the caller then works
// on the files, as without an agent. While an agent runs its changes go
// through it, so there is one writer and each change is audited with
// decided_via cli. A discovery file, socket or answering process of
// another user is never spoken to: liveAgent says so on stderr and the
// caller works on the files.
func liveAgent(ctx context.Context, e *Env, p device.Paths) *localapi.Client {
	c, _, err := localapi.Discover(ctx, p.Config)
	if errors.Is(err, localapi.ErrNotOwned) {
		fmt.Fprintf(e.Stderr, "roomrelay: warning: %s\n", relay.PrintableLine(err.Error()))
		return nil
	}
	if err != nil {
		return nil
	}
	c.Name = "roomrelay-cli/" + Version
	return c
}

// apiFailure turns a local API refusal into the CLI's error and exit code.
func apiFailure(verb string, err error) error {
	var ae *localapi.APIError
	if !errors.As(err, &ae) {
		return fmt.Errorf("%s through the running agent: %w", verb, err)
	}
	switch c := relay.Code(ae.Code); c {
	case relay.CodeInvalidArgs:
		// The agent refused what the owner typed: a usage error of this
		// invocation, like a flag the CLI itself refuses.
		return exitErr(ExitUsage, errors.New(ae.Message))
	default:
		// A code of relay's table exits by it (75 try again later, …); the
		// local API's own codes (conflict, hash_mismatch, …) exit 1.
		return exitErr(c.ExitCode(), fmt.Errorf("not %s: %s (%s)", verb, ae.Message, ae.Code))
	}
}

//go:build agentonly

package cli

import (
	"context"
	"flag"
)

// The device build (go build -tags agentonly, what the .deb and .rpm ship)
// leaves the hub server and the demo out: they link nats-server, whose
// process sampler wakes every process that links it once a second, and
// they add megabytes a device agent never runs. The admin commands (hub
// pair, devices, revoke, call) only speak HTTP and stay in.

// buildFlavor is reported by `roomrelay version`.
const buildFlavor = "agent"

func init() {
	for _, name := range []string{"hub", "demo"} {
		register(&command{
			Name:    name,
			Hidden:  true, // runnable, to say so, but not listed, completed or in the man page
			Summary: "not in this build: the device build (-tags agentonly) leaves the hub and the demo out",
			Setup: func(fs *flag.FlagSet, e *Env) Runner {
				return func(ctx context.Context, args []string) error {
					return usagef("not in this build: this is the device build (-tags agentonly), which leaves " +
						"the hub and the demo out; run them from the full binary (go build ./cmd/roomrelay)")
				}
			},
		})
	}
}

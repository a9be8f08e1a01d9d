//go:build !agentonly

package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"path/filepath"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// This file is the hub server command. The device build (-tags agentonly)
// leaves it out, and with it nats-server, whose process sampler would wake
// an idle agent every second; see hub_agentonly.go.

func init() {
	register(&Command{
		Name:     "hub",
		Synopsis: "[--listen ADDR] [--data-dir DIR] [--nats URL]",
		Summary:  "run the cloud hub: the agents' websocket endpoint and the HTTP API",
		Help: `The hub stores enrollments and routes commands through NATS: an embedded
in-process server with JetStream in the data dir by default (no port opened),
or an external NATS server or cluster with --nats. Its admin token is read from
--admin-token, ROOMRELAY_ADMIN_TOKEN, or the file admin-token in the data dir
(created 0600 on first start). Terminate TLS in front of it for non-loopback use.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
			paths := pathFlags(fs, e)
			listen := fs.String("listen", DefaultHubListen, "HTTP listen `address`")
			dataDir := fs.String("data-dir", "", "hub data `dir` (default DATA/hub)")
			natsURL := fs.String("nats", e.Getenv("ROOMRELAY_NATS_URL"), "external NATS `url` (default: embedded; env ROOMRELAY_NATS_URL)")
			heartbeat := fs.Duration("heartbeat", hub.DefaultHeartbeat, "ping interval; the read deadline is 2.5x")
			node := fs.String("node", "", "node `name` in presence records (default hostname)")
			adminToken := fs.String("admin-token", "", "admin `token` (default env ROOMRELAY_ADMIN_TOKEN or DATA/hub/admin-token)")
			return func(ctx context.Context, args []string) error {
				if len(args) > 0 {
					return usagef("unexpected argument %q (subcommands: pair, revoke, devices, call)", args[0])
				}
				dir, err := hubDataDir(paths, *dataDir)
				if err != nil {
					return err
				}
				tok, err := serveAdminToken(e, dir, *adminToken)
				if err != nil {
					return err
				}
				h, err := hub.New(hub.Config{DataDir: dir, Listen: *listen, NATSURL: *natsURL, AdminToken: tok,
					Heartbeat: *heartbeat, NodeName: *node, Logger: e.Logger})
				if err != nil {
					return err
				}
				errc := make(chan error, 1)
				go func() { errc <- h.Run(ctx) }()
				select {
				case <-h.Ready():
					nats := "embedded NATS in " + filepath.Join(dir, "nats")
					if *natsURL != "" {
						nats = "NATS at " + *natsURL
					}
					fmt.Fprintf(e.Stderr, "roomrelay hub listening on %s (%s); admin token in %s\n", h.URL(), nats, adminTokenSource(e, dir, *adminToken))
				case err := <-errc:
					return hubStartErr(err)
				}
				if err := <-errc; err != nil && !errors.Is(err, context.Canceled) {
					return err
				}
				return nil
			}
		},
	})
}

// serveAdminToken is the hub's own admin token: flag, env, or the data dir
// file, created on first start.
func serveAdminToken(e *Env, dataDir, flagTok string) (string, error) {
	if flagTok != "" || e.Getenv("ROOMRELAY_ADMIN_TOKEN") != "" {
		return hubAdminToken(e, dataDir, flagTok)
	}
	return hub.LoadOrCreateAdminToken(dataDir)
}

func adminTokenSource(e *Env, dir, flagTok string) string {
	switch {
	case flagTok != "":
		return "--admin-token"
	case e.Getenv("ROOMRELAY_ADMIN_TOKEN") != "":
		return "ROOMRELAY_ADMIN_TOKEN"
	}
	return filepath.Join(dir, "admin-token")
}

func hubStartErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "listen" {
		return exitErr(ExitUnavailable, fmt.Errorf("%w (another hub running? choose another --listen)", err))
	}
	return err
}

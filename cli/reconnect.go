package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
)

func init() {
	Register(&Command{
		Name:     "reconnect",
		Synopsis: "[--json]",
		Summary:  "ask the running agent to retry the hub now instead of waiting out its backoff",
		Help: `After the hub came back or the network was fixed, the agent may be waiting
up to a minute before its next attempt. This asks it to dial at once: it
drops a request file in the config dir, which the agent picks up within a
second, and waits for that. 'roomrelay status' then shows the outcome.

Exit codes: 0 the agent took the request; 1 it did not within 5 s;
3 not enrolled; 4 the agent is not running.`,
		Setup: setupReconnect,
	})
}

// setupReconnect parses the flags of `roomrelay reconnect` and returns its runner.
func setupReconnect(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("reconnect takes no arguments")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		cfg, err := device.LoadConfig(p)
		if err != nil {
			return err
		}
		st, ok := device.RunningAgent(p, cfg)
		if !ok {
			return exitErr(ExitUnavailable, errors.New("the agent is not running: start it (`roomrelay start`, or `roomrelay run` in the foreground)"))
		}
		req := filepath.Join(p.Config, daemon.ReconnectFile)
		if err := os.WriteFile(req, nil, 0o600); err != nil {
			return fmt.Errorf("ask the agent to reconnect: %w", err)
		}
		taken := waitGone(ctx, req, 5*time.Second)
		if *asJSON {
			if err := json.NewEncoder(e.Stdout).Encode(map[string]any{"pid": st.PID, "taken": taken, "state": st.State}); err != nil {
				return err
			}
		}
		if !taken {
			return exitErr(ExitFailure, fmt.Errorf("the agent (pid %d) did not take the request within 5 s; it stays in %s (an older agent may not know it: restart it with `roomrelay restart`)", st.PID, req))
		}
		if !*asJSON {
			fmt.Fprintf(e.Stdout, "the agent (pid %d, was %s) is dialling the hub now; `roomrelay status` shows how it went\n", st.PID, st.State)
		}
		return nil
	}
}

// waitGone waits until path no longer exists (the agent consumed it).
func waitGone(ctx context.Context, path string, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if _, err := os.Stat(path); errors.Is(err, fs.ErrNotExist) {
			return true
		}
		time.Sleep(50 * time.Millisecond)
	}
	return false
}

package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/localapi"
)

func init() {
	Register(&Command{
		Name:     "status",
		Synopsis: "[--json]",
		Summary:  "show the agent's connection state, last error, hub, device id and credential store",
		Help: `Exit codes: 0 online; 1 running but not online (connecting, backing off,
sleeping); 3 not enrolled or enrollment revoked; 4 the agent is not running.`,
		Setup: setupStatus,
	})
}

// setupStatus parses the flags of `roomrelay status` and returns its runner.
func setupStatus(fs *flag.FlagSet, e *Env) Runner {
	paths := pathFlags(fs, e)
	asJSON := fs.Bool("json", false, "print JSON")
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("status takes no arguments")
		}
		p, err := paths()
		if err != nil {
			return err
		}
		// The running agent's own answer when it runs; the status file
		// otherwise.
		var live *agent.Status
		var prov *localapi.ProviderState
		if c := liveAgent(ctx, e, p); c != nil {
			var st localapi.StatusResponse
			if _, err := c.Do(ctx, "GET", "status", nil, &st, nil); err == nil {
				live, prov = &st.Status, &st.Provider
			}
			c.Close()
		}
		r, verdict := device.DiagnoseLive(p, live)
		code := statusExit[verdict]
		if *asJSON {
			// The running agent's room provider rides beside the report.
			out := struct {
				device.Report
				Provider *localapi.ProviderState `json:"provider,omitempty"`
			}{r, prov}
			if err := json.NewEncoder(e.Stdout).Encode(out); err != nil {
				return err
			}
		} else {
			printStatus(e, r)
			printProvider(e, prov)
		}
		if code != ExitOK {
			return silent(code)
		}
		return nil
	}
}

// statusExit is the exit code `status` gives for a verdict.
var statusExit = map[device.Verdict]int{device.Online: ExitOK, device.NotOnline: ExitFailure,
	device.NotEnrolled: ExitNotEnrolled, device.NotRunning: ExitUnavailable}

func printStatus(e *Env, r device.Report) {
	w := e.Stdout
	fmt.Fprintf(w, "state:       %s\n", r.State)
	if r.Problem != "" {
		fmt.Fprintf(w, "problem:     %s\n", r.Problem)
	}
	if r.Fix != "" {
		fmt.Fprintf(w, "what to do:  %s\n", r.Fix)
	}
	if r.Hub != "" {
		fmt.Fprintf(w, "hub:         %s\ndevice:      %s\nprojects:    %v (enrolled at the hub)\ncredentials: %s\n", r.Hub, r.DeviceID, r.Projects, r.CredentialStore)
	}
	if l := r.LastRun; l != nil {
		fmt.Fprintf(w, "last run:    pid %d, not running; it last recorded %q at %s\n", l.PID, l.State, l.UpdatedAt.Local().Format(time.DateTime))
		if l.LastError != "" {
			fmt.Fprintf(w, "last error:  %s\n", l.LastError)
		}
	}
	if a := r.Agent; a != nil {
		if !a.ConnectedSince.IsZero() && a.State == agent.StateOnline {
			fmt.Fprintf(w, "connected:   since %s (session %s, %d reconnects)\n", a.ConnectedSince.Local().Format(time.DateTime), a.SessionID, a.Reconnects)
		}
		if a.LastError != "" {
			fmt.Fprintf(w, "last error:  %s (%s)\n", a.LastError, a.LastErrorAt.Local().Format(time.DateTime))
		}
		if !a.NextRetryAt.IsZero() && a.State == agent.StateBackoff {
			fmt.Fprintf(w, "next retry:  %s\n", a.NextRetryAt.Local().Format(time.TimeOnly))
		}
		fmt.Fprintf(w, "agent pid:   %d, %d commands in flight, %d events queued\n", a.PID, a.InFlight, a.QueuedEvents)
		for _, n := range a.Notes {
			fmt.Fprintf(w, "note:        %s\n", n)
		}
	}
}

// printProvider prints the running agent's room provider: which the policy
// selects and, for the desktop app, the connected app's name, version and
// process (nil: no agent answered).
func printProvider(e *Env, pv *localapi.ProviderState) {
	if pv == nil {
		return
	}
	w := e.Stdout
	switch {
	case pv.Connected:
		sel := pv.Selected
		if sel == "" {
			sel = "app"
		}
		fmt.Fprintf(w, "provider:    %s: %q %s, pid %d", sel, pv.App, pv.Version, pv.PID)
		if pv.Exe != "" {
			fmt.Fprintf(w, " (%s)", pv.Exe)
		}
		if !pv.Since.IsZero() {
			fmt.Fprintf(w, ", connected since %s", pv.Since.Local().Format(time.DateTime))
		}
		fmt.Fprintln(w)
	case pv.Selected == "app":
		fmt.Fprintln(w, "provider:    app: no desktop app connected (reads answer app_not_running)")
	case pv.Selected != "":
		fmt.Fprintf(w, "provider:    %s\n", pv.Selected)
	}
}

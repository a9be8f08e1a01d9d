package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
)

// statusReport is `roomrelay status --json`.
type statusReport struct {
	State           string   `json:"state"` // agent state, or not_enrolled / not_running
	Problem         string   `json:"problem,omitempty"`
	Fix             string   `json:"fix,omitempty"`
	Hub             string   `json:"hub,omitempty"`
	DeviceID        string   `json:"device_id,omitempty"`
	Projects        []string `json:"projects,omitempty"`
	CredentialStore string   `json:"credential_store,omitempty"`
	// Agent is the running agent's status; LastRun what an agent that is
	// no longer running last recorded (its connection facts are history).
	Agent   *agent.Status `json:"agent,omitempty"`
	LastRun *lastRun      `json:"last_run,omitempty"`
}

// lastRun is what a stopped (or killed) agent last wrote.
type lastRun struct {
	PID       int       `json:"pid"`
	State     string    `json:"state"` // as it last recorded it
	LastError string    `json:"last_error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

func init() {
	Register(&Command{
		Name:     "status",
		Synopsis: "[--json]",
		Summary:  "show the agent's connection state, last error, hub, device id and credential store",
		Help: `Exit codes: 0 online; 1 running but not online (connecting, backing off,
sleeping); 3 not enrolled or enrollment revoked; 4 the agent is not running.`,
		Setup: func(fs *flag.FlagSet, e *Env) Runner {
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
				r, code := buildStatus(p)
				if *asJSON {
					if err := json.NewEncoder(e.Stdout).Encode(r); err != nil {
						return err
					}
				} else {
					printStatus(e, r)
				}
				if code != ExitOK {
					return silent(code)
				}
				return nil
			}
		},
	})
}

func buildStatus(p devicePaths) (statusReport, int) {
	cfg, err := loadDeviceConfig(p)
	if err != nil {
		var ee *ExitError
		if errors.As(err, &ee) && ee.Code == ExitNotEnrolled {
			return statusReport{State: "not_enrolled", Problem: "this device is not enrolled with a hub",
				Fix: "get a pairing code (`roomrelay hub pair --project P` on the hub) and run `roomrelay enroll --hub URL --code CODE`"}, ExitNotEnrolled
		}
		return statusReport{State: "error", Problem: err.Error(), Fix: "enroll again to rewrite the device config"}, ExitFailure
	}
	r := statusReport{Hub: cfg.Hub, DeviceID: cfg.DeviceID, Projects: cfg.Projects}
	switch cfg.CredentialStore {
	case credstore.KindFile:
		r.CredentialStore = "file " + p.Config + "/" + credstore.FileName + " (0600, chosen explicitly)"
	default:
		r.CredentialStore = "OS keyring"
	}
	st, err := agent.ReadStatusFile(p.State)
	if err == nil && (st.DeviceID != cfg.DeviceID || st.UpdatedAt.Before(cfg.EnrolledAt)) {
		// Written for an identity enrolled before this one: none of it is
		// about this enrollment.
		err = fs.ErrNotExist
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && !processAlive(st.PID)) || (err == nil && st.State == agent.StateStopped) {
		r.State = "not_running"
		r.Problem = "the agent is not running"
		r.Fix = "start it: `roomrelay run`, or `roomrelay install` to run it as a service"
		if err == nil {
			r.LastRun = &lastRun{PID: st.PID, State: st.State, LastError: st.LastError, UpdatedAt: st.UpdatedAt}
			if st.State == agent.StateNeedsEnrollment {
				r.State, r.Problem = agent.StateNeedsEnrollment, "the hub refused this device's token (revoked or unknown)"
				r.Fix = "enroll again with a new pairing code: `roomrelay enroll --hub " + cfg.Hub + " --code CODE`"
				return r, ExitNotEnrolled
			}
		}
		return r, ExitUnavailable
	}
	if err != nil {
		r.State, r.Problem = "error", err.Error()
		return r, ExitFailure
	}
	r.Agent = &st
	r.State = st.State
	switch st.State {
	case agent.StateOnline:
		return r, ExitOK
	case agent.StateNeedsEnrollment:
		r.Problem = "the hub refused this device's token (revoked or unknown)"
		r.Fix = "enroll again with a new pairing code: `roomrelay enroll --hub " + cfg.Hub + " --code CODE`"
		return r, ExitNotEnrolled
	case agent.StateBackoff, agent.StateConnecting:
		r.Problem = "not connected to the hub"
		if st.LastError != "" {
			r.Problem += ": " + st.LastError
		}
		r.Fix = "check the network and that the hub at " + cfg.Hub + " is up; the agent retries by itself"
		if strings.Contains(st.LastError, tlsfiles.UntrustedHint) {
			r.Fix = "restart the agent with --ca-file FILE (or ROOMRELAY_CA_FILE), or enroll again with --ca-file: the file holds the CA that signed the hub's certificate"
		} else if strings.Contains(st.LastError, "TLS certificate") {
			r.Fix = "fix the hub's TLS certificate or the hub URL as the error says; the agent retries by itself"
		}
	case agent.StateSleeping:
		r.Problem = "the device announced sleep; it reconnects on wake"
	case agent.StateError:
		r.Problem = st.LastError
		r.Fix = "see the agent's log; restart it after fixing the cause"
	}
	return r, ExitFailure
}

func printStatus(e *Env, r statusReport) {
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

// runningAgent returns the status of the agent running for this device's
// enrollment, and false when none is (no status file, one written for an
// earlier identity, a dead pid, or a clean stop).
func runningAgent(p devicePaths, cfg *deviceConfig) (agent.Status, bool) {
	st, err := agent.ReadStatusFile(p.State)
	if err != nil || st.DeviceID != cfg.DeviceID || !processAlive(st.PID) || st.State == agent.StateStopped {
		return st, false
	}
	return st, true
}

// processAlive reports whether pid names a running process.
func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	// Signal 0 checks existence without delivering anything (Unix); on
	// Windows FindProcess already failed for a dead pid.
	err = p.Signal(syscall.Signal(0))
	return err == nil || errors.Is(err, os.ErrPermission)
}

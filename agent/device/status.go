package device

import (
	"errors"
	"io/fs"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/internal/ownerfile"
	"github.com/roomrelay/roomrelay/internal/proc"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay"
)

// Report is what Diagnose found: `roomrelay status --json`.
type Report struct {
	State           string   `json:"state"` // agent state, or not_enrolled / not_running / error
	Problem         string   `json:"problem,omitempty"`
	Fix             string   `json:"fix,omitempty"`
	Hub             string   `json:"hub,omitempty"`
	DeviceID        string   `json:"device_id,omitempty"`
	Projects        []string `json:"projects,omitempty"`
	CredentialStore string   `json:"credential_store,omitempty"`
	// Agent is the running agent's status; LastRun what an agent that is
	// no longer running last recorded (its connection facts are history).
	Agent   *agent.Status `json:"agent,omitempty"`
	LastRun *LastRun      `json:"last_run,omitempty"`
	// Source says where Agent came from: local_api (the running agent
	// answered) or status_file.
	Source string `json:"source,omitempty"`
}

// LastRun is what a stopped (or killed) agent last wrote.
type LastRun struct {
	PID       int       `json:"pid"`
	State     string    `json:"state"` // as it last recorded it
	LastError string    `json:"last_error,omitempty"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Verdict sums a Report up for a caller choosing an exit code.
type Verdict int

const (
	Online      Verdict = iota // connected to the hub
	NotOnline                  // running but not online (connecting, backing off, sleeping), or failed
	NotEnrolled                // not enrolled, or the hub refused the token
	NotRunning                 // enrolled, but no agent runs
)

const enrollFix = "get a pairing code (`roomrelay hub pair --project P` on the hub) and run `roomrelay enroll --hub URL --code CODE`"

// Diagnose says what state the device's agent is in, what is wrong and
// what to do, from the identity and the running agent's status file. A
// status file written for an earlier identity, by a dead process or by an
// agent that stopped is never reported as the present.
func Diagnose(p Paths) (Report, Verdict) { return DiagnoseLive(p, nil) }

// DiagnoseLive is Diagnose with the running agent's status as its local
// API answered it (nil: read the status file).
func DiagnoseLive(p Paths, live *agent.Status) (Report, Verdict) {
	r, v := diagnose(p, live)
	return r.printable(), v
}

// printable returns r with every string shown through
// relay.PrintableLine: the status file's last error and session id, and the
// device id and projects of the config, came from the hub. Text and JSON
// output alike carry no terminal escapes then, whatever wrote the files.
func (r Report) printable() Report {
	for _, s := range []*string{&r.State, &r.Problem, &r.Fix, &r.Hub, &r.DeviceID, &r.CredentialStore} {
		*s = relay.PrintableLine(*s)
	}
	r.Projects = printableAll(r.Projects)
	if r.LastRun != nil {
		l := *r.LastRun
		l.State, l.LastError = relay.PrintableLine(l.State), relay.PrintableLine(l.LastError)
		r.LastRun = &l
	}
	if r.Agent != nil {
		a := *r.Agent
		for _, s := range []*string{&a.State, &a.LastError, &a.SessionID, &a.DeviceID, &a.Hub} {
			*s = relay.PrintableLine(*s)
		}
		a.Notes = printableAll(a.Notes)
		r.Agent = &a
	}
	return r
}

func printableAll(ss []string) []string {
	if ss == nil {
		return nil
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = relay.PrintableLine(s)
	}
	return out
}

func diagnose(p Paths, live *agent.Status) (Report, Verdict) {
	cfg, err := LoadConfig(p)
	if err != nil {
		if KindOf(err) == KindNotEnrolled {
			return Report{State: "not_enrolled", Problem: "this device is not enrolled with a hub", Fix: enrollFix}, NotEnrolled
		}
		return Report{State: "error", Problem: err.Error(), Fix: "enroll again to rewrite the device config"}, NotOnline
	}
	r := Report{Hub: cfg.Hub, DeviceID: cfg.DeviceID, Projects: cfg.Projects}
	switch cfg.CredentialStore {
	case credstore.KindFile:
		r.CredentialStore = "file " + p.Config + "/" + credstore.FileName + " (" + ownerfile.Describe() + ", chosen explicitly)"
	default:
		r.CredentialStore = "OS keyring"
	}
	reenroll := "enroll again with a new pairing code: `roomrelay enroll --hub " + cfg.Hub + " --code CODE`"
	st, err := agent.ReadStatusFile(p.State)
	r.Source = "status_file"
	if live != nil {
		st, err = *live, nil
		r.Source = "local_api"
	}
	if err == nil && aboutAnother(st, cfg) {
		err = fs.ErrNotExist // none of it is about this enrollment
	}
	if errors.Is(err, fs.ErrNotExist) || (err == nil && live == nil && !proc.Alive(st.PID)) || (err == nil && st.State == agent.StateStopped) {
		r.State = "not_running"
		r.Problem = "the agent is not running"
		r.Fix = "start it: `roomrelay run`, or `roomrelay install` to run it as a service"
		if err == nil {
			r.LastRun = &LastRun{PID: st.PID, State: st.State, LastError: st.LastError, UpdatedAt: st.UpdatedAt}
			if st.State == agent.StateNeedsEnrollment {
				r.State, r.Problem, r.Fix = agent.StateNeedsEnrollment, "the hub refused this device's token (revoked or unknown)", reenroll
				return r, NotEnrolled
			}
		}
		return r, NotRunning
	}
	if err != nil {
		r.State, r.Problem = "error", err.Error()
		return r, NotOnline
	}
	r.Agent = &st
	r.State = st.State
	switch st.State {
	case agent.StateOnline:
		return r, Online
	case agent.StateNeedsEnrollment:
		r.Problem, r.Fix = "the hub refused this device's token (revoked or unknown)", reenroll
		return r, NotEnrolled
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
	return r, NotOnline
}

// RunningAgent returns the status of the agent running for this device's
// enrollment, and false when none is (no status file, one written for an
// earlier identity, a dead pid, or a clean stop).
func RunningAgent(p Paths, cfg *Config) (agent.Status, bool) {
	st, err := agent.ReadStatusFile(p.State)
	if err != nil || aboutAnother(st, cfg) || !proc.Alive(st.PID) || st.State == agent.StateStopped {
		return st, false
	}
	return st, true
}

// aboutAnother reports whether a status file was written for an identity
// enrolled before this one.
func aboutAnother(st agent.Status, cfg *Config) bool {
	return st.DeviceID != cfg.DeviceID || st.UpdatedAt.Before(cfg.EnrolledAt)
}

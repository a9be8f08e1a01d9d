package cli

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/url"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/sandbox"
)

// check is one line of `roomrelay doctor`.
type check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // ok, warn, fail
	Detail string `json:"detail"`
	Fix    string `json:"fix,omitempty"`
}

// maxSkew is the clock difference doctor calls a failure: command
// deadlines are judged on the hub's clock beyond 2 s (agent.skewTolerance),
// and pairing codes and tokens carry times.
const maxSkew = 30 * time.Second

func init() {
	Register(&Command{
		Name:     "doctor",
		Synopsis: "[--json] [--timeout 10s] [--system]",
		Summary:  "check this device's setup: config, credentials, hub (DNS, TCP, TLS, token), clock, service, sandbox, audit log",
		Help: `One line per check, with what to do when it is not ok: the device config,
the credential store, the policy file, the hub (its name resolves, a TCP
connection opens, TLS verifies, the device token is accepted), the clock
against the hub's, the agent and its service, the sandbox worker and React
runtime, and the audit log's hash chain.

Exit codes: 0 every check ok (warnings allowed); 1 a check failed; 3 not
enrolled.`,
		Setup: setupDoctor,
	})
}

// setupDoctor parses the flags of `roomrelay doctor` and returns its runner.
func setupDoctor(fs *flag.FlagSet, e *Env) Runner {
	svc := addSvcFlags(fs, e) // --home and --system, as `service status` reads them
	asJSON := fs.Bool("json", false, "print JSON")
	timeout := fs.Duration("timeout", 10*time.Second, "bound on each network check")
	rf := addRuntimeFlags(fs, e)
	caFile := caFileFlag(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("doctor takes no arguments")
		}
		p, err := svc.paths()
		if err != nil {
			return err
		}
		d := &doctor{e: e, p: p, svc: svc, timeout: *timeout, rf: rf, caFile: *caFile}
		checks := d.run(ctx)
		failed, notEnrolled := false, false
		for _, c := range checks {
			failed = failed || c.Status == "fail"
			notEnrolled = notEnrolled || (c.Name == "config" && c.Status == "fail" && strings.Contains(c.Detail, "not enrolled"))
		}
		if *asJSON {
			if err := json.NewEncoder(e.Stdout).Encode(map[string]any{"ok": !failed, "checks": checks}); err != nil {
				return err
			}
		} else {
			printChecks(e.Stdout, checks)
		}
		switch {
		case notEnrolled:
			return silent(ExitNotEnrolled)
		case failed:
			return silent(ExitFailure)
		}
		return nil
	}
}

type doctor struct {
	e       *Env
	p       device.Paths
	svc     svcFlags
	timeout time.Duration
	rf      runtimeFlags
	caFile  string
	checks  []check
}

// add records a check. Its detail often quotes the hub (a reason phrase, a
// JSON error message, the agent's last error): every detail and fix is
// shown through relay.PrintableLine, in the text and the JSON alike.
func (d *doctor) add(name, status, detail, fix string) {
	d.checks = append(d.checks, check{Name: name, Status: status, Detail: relay.PrintableLine(detail), Fix: relay.PrintableLine(fix)})
}

func (d *doctor) run(ctx context.Context) []check {
	cfg, err := device.LoadConfig(d.p)
	if err != nil {
		d.add("config", "fail", err.Error(), "enroll: `roomrelay enroll --hub URL --code CODE`")
	} else {
		d.add("config", "ok", fmt.Sprintf("device %s at %s, projects %s", cfg.DeviceID, cfg.Hub, strings.Join(cfg.Projects, ", ")), "")
	}
	if pol, err := allowlist.Load(policyPath(d.p)); err != nil {
		d.add("policy", "fail", err.Error(), "fix the line it names in "+policyPath(d.p)+", or rewrite it with `roomrelay enable`")
	} else if ps := pol.Summary(); len(ps) == 0 {
		d.add("policy", "warn", "no project enabled: every command is denied", "`roomrelay enable PROJECT` to serve one")
	} else {
		names := make([]string, len(ps))
		for i, x := range ps {
			names[i] = x.Project
		}
		d.add("policy", "ok", "serves "+strings.Join(names, ", "), "")
	}
	var token string
	if cfg != nil {
		token = d.credentials(ctx, cfg)
		if token != "" {
			d.hub(ctx, cfg, token)
		}
		d.agent(cfg)
	}
	d.service(ctx)
	d.sandbox()
	d.audit(ctx)
	if cfg != nil && token != "" {
		d.auditAnchor(ctx, cfg, token)
	}
	return d.checks
}

func (d *doctor) credentials(ctx context.Context, cfg *device.Config) string {
	cs, err := credstore.Open(ctx, cfg.CredentialStore, d.p.Config)
	if err != nil {
		d.add("credentials", "fail", err.Error(), "see docs/install.md (credential store); a headless box can enroll again with --credential-store file")
		return ""
	}
	tok, err := cs.Get(ctx, cfg.DeviceID)
	if err != nil {
		d.add("credentials", "fail", fmt.Sprintf("no token for %s in the %s: %v", cfg.DeviceID, cs.Where(), err), "enroll again with a new pairing code")
		return ""
	}
	d.add("credentials", "ok", "device token in the "+cs.Where(), "")
	return tok
}

func (d *doctor) hub(ctx context.Context, cfg *device.Config, token string) {
	u, err := url.Parse(cfg.Hub)
	if err != nil || u.Hostname() == "" {
		d.add("hub", "fail", fmt.Sprintf("hub URL %q in the device config: %v", cfg.Hub, err), "enroll again with the right --hub")
		return
	}
	host, port := u.Hostname(), u.Port()
	if port == "" {
		port = map[string]string{"https": "443", "wss": "443"}[u.Scheme]
		if port == "" {
			port = "80"
		}
	}
	cctx, cancel := context.WithTimeout(ctx, d.timeout)
	defer cancel()
	addrs, err := net.DefaultResolver.LookupHost(cctx, host)
	if err != nil {
		d.add("hub dns", "fail", fmt.Sprintf("%s does not resolve: %v", host, err), "check the hub's name and this machine's DNS")
		return
	}
	d.add("hub dns", "ok", fmt.Sprintf("%s → %s", host, strings.Join(addrs, ", ")), "")
	conn, err := (&net.Dialer{}).DialContext(cctx, "tcp", net.JoinHostPort(host, port))
	if err != nil {
		d.add("hub tcp", "fail", fmt.Sprintf("cannot connect to %s: %v", net.JoinHostPort(host, port), err), "is the hub up? is a firewall or proxy in the way?")
		return
	}
	conn.Close()
	d.add("hub tcp", "ok", "connected to "+net.JoinHostPort(host, port), "")

	ca := d.caFile
	if ca == "" {
		ca = cfg.CAFile
	}
	hc, err := hubHTTPClient(ca)
	if err != nil {
		d.add("hub tls", "fail", err.Error(), "fix --ca-file (or ROOMRELAY_CA_FILE)")
		return
	}
	cl := hubclient.New(cfg.Hub, "")
	cl.HTTP = hc
	sent := time.Now()
	self, err := cl.Self(cctx, token)
	rtt := time.Since(sent)
	var ae *hubclient.APIError
	switch {
	case err == nil:
	case errors.As(err, &ae) && ae.Status == 401:
		if u.Scheme == "https" {
			d.add("hub tls", "ok", "the hub's certificate verifies", "")
		}
		d.add("hub auth", "fail", fmt.Sprintf("the hub refuses this device's token (%s): %s", ae.Code, ae.Message), "enroll again with a new pairing code: `roomrelay enroll --hub "+cfg.Hub+" --code CODE`")
		return
	case errors.As(err, &ae) && ae.Status == 404:
		d.add("hub auth", "warn", "the hub is older than this agent (no /v1/device): token and clock not checked", "")
		return
	default:
		if ex := tlsfiles.Explain(err); ex != nil {
			d.add("hub tls", "fail", ex.Error(), "pass --ca-file FILE (or set ROOMRELAY_CA_FILE) with the CA that signed the hub's certificate")
			return
		}
		d.add("hub http", "fail", err.Error(), "check the hub URL and its logs")
		return
	}
	if u.Scheme == "https" {
		d.add("hub tls", "ok", "the hub's certificate verifies", "")
	}
	if self.DeviceID != cfg.DeviceID {
		d.add("hub auth", "fail", fmt.Sprintf("the token belongs to %s, the config says %s", self.DeviceID, cfg.DeviceID), "enroll again")
		return
	}
	d.add("hub auth", "ok", fmt.Sprintf("the hub accepts the token of %s (projects %s)", self.DeviceID, strings.Join(self.Projects, ", ")), "")
	// The hub's time was taken somewhere within the round trip.
	skew := self.ServerTime.Sub(sent.Add(rtt / 2))
	switch abs := max(skew, -skew); {
	case abs > maxSkew:
		d.add("clock", "fail", fmt.Sprintf("this clock is %s off the hub's", skew.Round(time.Millisecond)), "turn on time sync (NTP): `timedatectl set-ntp true` on Linux")
	case abs > 2*time.Second:
		d.add("clock", "warn", fmt.Sprintf("this clock is %s off the hub's; deadlines are judged on the hub's clock", skew.Round(time.Millisecond)), "turn on time sync (NTP)")
	default:
		d.add("clock", "ok", fmt.Sprintf("within %s of the hub's (round trip %s)", max(skew, -skew).Round(time.Millisecond), rtt.Round(time.Millisecond)), "")
	}
}

func (d *doctor) agent(cfg *device.Config) {
	st, running := device.RunningAgent(d.p, cfg)
	switch {
	case !running:
		d.add("agent", "warn", "not running", "start it: `roomrelay start` (the service) or `roomrelay run`")
	case st.State == agent.StateOnline:
		d.add("agent", "ok", fmt.Sprintf("pid %d, online since %s", st.PID, st.ConnectedSince.Local().Format(time.DateTime)), "")
	default:
		d.add("agent", "fail", fmt.Sprintf("pid %d is %s: %s", st.PID, st.State, st.LastError), "see `roomrelay status` and `roomrelay logs`")
	}
}

func (d *doctor) service(ctx context.Context) {
	r, _, err := serviceReport(ctx, d.e, d.svc)
	switch {
	case err != nil:
		d.add("service", "warn", strings.ReplaceAll(err.Error(), "\n  ", " "), "")
	case !r.Installed:
		d.add("service", "warn", "not installed ("+r.Kind+")", "`roomrelay install` to run the agent as a service")
	case !r.Running:
		d.add("service", "fail", r.Kind+" "+r.State+": "+r.Problem, "`roomrelay start`; `roomrelay logs` says why it stopped")
	default:
		d.add("service", "ok", r.Kind+" running", "")
	}
}

func (d *doctor) sandbox() {
	if w, err := sandboxWorker(d.e); err != nil {
		d.add("sandbox worker", "warn", err.Error()+": approved snippets are not smoke-run", "reinstall the package")
	} else {
		d.add("sandbox worker", "ok", strings.Join(w, " "), "")
	}
	cfg, err := d.rf.config(d.e)
	if err == nil {
		err = sandbox.CheckRuntime(cfg)
	}
	if err != nil {
		d.add("sandbox runtime", "warn", "React "+sandbox.ReactVersion+" runtime not present: "+err.Error(), "`roomrelay snippet fetch-runtime` (the agent also fetches it on first use)")
		return
	}
	d.add("sandbox runtime", "ok", "React "+sandbox.ReactVersion+" present and verified", "")
}

func (d *doctor) audit(ctx context.Context) {
	rep, err := audit.Verify(filepath.Join(d.p.State, daemon.AuditDir))
	switch {
	case err != nil:
		d.add("audit log", "fail", err.Error(), "")
	case !rep.OK():
		d.add("audit log", "fail", fmt.Sprintf("%d problem(s), first: %s", len(rep.Problems), rep.Problems[0]), "`roomrelay audit verify` lists them; keep the files for an investigation")
	case rep.Lines == 0:
		if n, _ := agent.RecordedCommands(ctx, d.p.State); n > 0 {
			d.add("audit log", "fail", fmt.Sprintf("no audit log, but %d commands ran", n), "`roomrelay audit verify` says more")
			return
		}
		d.add("audit log", "ok", "empty: no command has reached this device", "")
	default:
		d.add("audit log", "ok", fmt.Sprintf("%d lines, the hash chain verifies", rep.Lines), "")
	}
}

// auditAnchor compares the local audit log with the anchor the hub keeps
// (the furthest head the agent reported): a deleted, truncated or
// rewritten log fails here even when what is left verifies.
func (d *doctor) auditAnchor(ctx context.Context, cfg *device.Config, token string) {
	gap, anchor, err := anchorGap(ctx, d.p, cfg, token)
	switch {
	case err != nil:
		d.add("audit anchor", "warn", "not compared with the hub's: "+err.Error(), "")
	case gap != "":
		d.add("audit anchor", "fail", gap, "keep the remaining files for an investigation; the hub keeps its anchor (re-enrolling starts a new device record)")
	case anchor.Seq == 0:
		d.add("audit anchor", "ok", "the hub holds no audit head for this device yet", "")
	default:
		d.add("audit anchor", "ok", fmt.Sprintf("the log reaches the hub's anchor (seq %d)", anchor.Seq), "")
	}
}

func printChecks(w io.Writer, checks []check) {
	mark := map[string]string{"ok": "ok  ", "warn": "warn", "fail": "FAIL"}
	for _, c := range checks {
		fmt.Fprintf(w, "%s  %-16s %s\n", mark[c.Status], c.Name, c.Detail)
		if c.Fix != "" && c.Status != "ok" {
			fmt.Fprintf(w, "      %-16s → %s\n", "", c.Fix)
		}
	}
}

package hubcmd

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/examples"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
	"github.com/roomrelay/roomrelay/sandbox"
)

func init() {
	cli.Register(&cli.Command{
		Name:     "demo",
		Synopsis: "[--keep] [--no-sandbox] [--verbose]",
		Summary:  "run a real hub and a real agent end to end on loopback, and narrate it",
		Help: `In one process with a temporary state dir: an embedded hub (embedded NATS) on a
loopback port, a pairing code, enrollment (file credential store inside the
temp dir, so the demo never touches your keyring), a local Room, the owner's
allowlist, commands through the hub, refusals, a proposal through the review
gate with a smoke-run in the sandbox, the example desktop app (from a
checkout with Node >= 20 on PATH; the first run does the npm installs in
clients/ts and examples/desktop-app: it provides a Room, closes, reopens and
installs an approved snippet), an MCP client's OAuth sign-in with no token (registration,
the consent page, the owner's approval through the agent's local API, the
code exchange with PKCE, read_room with the access token; the hub's
loopback URL is its OAuth issuer), the audit log, and the device going offline.
Prints what happened with the timings it measured; exits 0 when every step
behaved as expected, and names the steps this machine could not show (no
Node); a step that did not behave makes it exit non-zero, naming it.`,
		Setup: setupDemo,
	})
}

// setupDemo parses the flags of `roomrelay demo` and returns its runner.
func setupDemo(fs *flag.FlagSet, e *cli.Env) cli.Runner {
	keep := fs.Bool("keep", false, "keep the temporary directory and print its path")
	noSandbox := fs.Bool("no-sandbox", false, "skip the sandbox smoke-run (no React runtime fetch)")
	verbose := fs.Bool("verbose", false, "show the hub's and agent's logs")
	sandboxConfig := cli.SandboxFlags(fs, e)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("demo takes no arguments")
		}
		dir, err := os.MkdirTemp("", "roomrelay-demo-")
		if err != nil {
			return err
		}
		if *keep {
			fmt.Fprintf(e.Stdout, "state kept in %s\n", dir)
		} else {
			defer os.RemoveAll(dir)
		}
		logger := slog.New(slog.DiscardHandler)
		if *verbose {
			logger = e.Logger
		}
		d := &demo{e: e, dir: dir, log: logger, start: time.Now()}
		return d.run(ctx, sandboxConfig, !*noSandbox)
	}
}

type demo struct {
	e     *cli.Env
	dir   string
	log   *slog.Logger
	start time.Time
	last  time.Time
	// failures are the steps that did not behave (the demo exits
	// non-zero); skipped are the steps this machine cannot show, with why.
	failures []string
	skipped  []string
}

func (d *demo) say(format string, args ...any) {
	now := time.Now()
	fmt.Fprintf(d.e.Stdout, "[%7.1f ms] %s\n", float64(now.Sub(d.start).Microseconds())/1000, fmt.Sprintf(format, args...))
	d.last = now
}

func (d *demo) detail(format string, args ...any) {
	fmt.Fprintf(d.e.Stdout, "             %s\n", fmt.Sprintf(format, args...))
}

// expect records a step that did not behave as it should; the demo goes on
// and exits non-zero at the end.
func (d *demo) expect(ok bool, format string, args ...any) {
	if !ok {
		msg := fmt.Sprintf(format, args...)
		d.failures = append(d.failures, firstLine(msg))
		fmt.Fprintf(d.e.Stdout, "             UNEXPECTED: %s\n", msg)
	}
}

// skip records a step this machine cannot show (no Node, no checkout): not
// a failure, but the last line says it was not shown.
func (d *demo) skip(step, why string) {
	d.skipped = append(d.skipped, step+": "+why)
	d.say("%s is not shown: %s", step, why)
}

// summary is the demo's last lines and whether it passed: "every step
// behaved as expected" only when no step failed, naming what was not shown.
func summary(failures, skipped []string, took time.Duration) (string, bool) {
	var b strings.Builder
	if len(failures) > 0 {
		fmt.Fprintf(&b, "demo FAILED: %d step(s) did not behave as expected:\n", len(failures))
		for _, f := range failures {
			fmt.Fprintf(&b, "  - %s\n", f)
		}
		for _, s := range skipped {
			fmt.Fprintf(&b, "  (not shown: %s)\n", s)
		}
		return b.String(), false
	}
	if len(skipped) > 0 {
		fmt.Fprintf(&b, "demo finished: every step that ran behaved as expected (%s); not shown on this machine:\n", took)
		for _, s := range skipped {
			fmt.Fprintf(&b, "  - %s\n", s)
		}
		return b.String(), true
	}
	fmt.Fprintf(&b, "demo finished: every step behaved as expected (%s)\n", took)
	return b.String(), true
}

func since(t time.Time) string {
	return fmt.Sprintf("%.2f ms", float64(time.Since(t).Microseconds())/1000)
}

const demoProject = "demo-project"

func (d *demo) run(ctx context.Context, sandboxConfig func() (sandbox.Config, error), withSandbox bool) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	fmt.Fprintf(d.e.Stdout, "roomrelay demo — a real hub and a real agent over a loopback websocket (%s/%s)\n\n", runtime.GOOS, runtime.GOARCH)

	// --- the hub -----------------------------------------------------------
	t0 := time.Now()
	hubDir := filepath.Join(d.dir, "hub")
	adminTok, err := hub.LoadOrCreateAdminToken(hubDir)
	if err != nil {
		return err
	}
	// Listen first: the port is known before the hub is configured, so its
	// URL is the OAuth issuer (`--public-url`) for the OAuth step.
	ln, err := listenHub("127.0.0.1:0")
	if err != nil {
		return err
	}
	srv, err := startHubServer(ctx, hub.Config{DataDir: hubDir, AdminToken: adminTok, Logger: d.log,
		DrainSpread: 100 * time.Millisecond, DrainGrace: 200 * time.Millisecond}, ln, "http://"+ln.Addr().String(), oauthOptions{on: true}, defaultConnLimits, nil)
	if err != nil {
		return fmt.Errorf("hub did not start: %w", err)
	}
	defer srv.close()
	hubURL := srv.url
	d.say("hub listening on %s, embedded NATS with JetStream, no NATS port opened; MCP endpoint %s/mcp, OAuth issuer %s (%s)", hubURL, hubURL, hubURL, since(t0))
	admin := hubclient.New(hubURL, adminTok)

	// --- enrollment --------------------------------------------------------
	t0 = time.Now()
	pc, err := admin.Pair(ctx, demoProject, 0)
	if err != nil {
		return err
	}
	d.say("hub operator: `roomrelay hub pair --project %s` → code %s, single use, expires %s", demoProject, pc.Code, pc.ExpiresAt.Local().Format(time.TimeOnly))
	enr, err := hubclient.New(hubURL, "").Enroll(ctx, pc.Code, "demo-laptop", runtime.GOOS, "")
	if err != nil {
		return err
	}
	p, err := cli.SaveEnrollment(filepath.Join(d.dir, "device"), hubURL, enr.DeviceID, "demo-laptop", enr.Projects)
	if err != nil {
		return err
	}
	cs, err := credstore.Open(ctx, credstore.KindFile, p.Config)
	if err != nil {
		return err
	}
	if err := cs.Set(ctx, enr.DeviceID, enr.Token); err != nil {
		return err
	}
	d.say("device: `roomrelay enroll` → device %s; token in the %s (%s)", enr.DeviceID, cs.Where(), since(t0))
	_, err = hubclient.New(hubURL, "").Enroll(ctx, pc.Code, "thief", runtime.GOOS, "")
	d.expect(hubclient.IsCode(err, hubapi.CodePairingCodeUsed), "a reused pairing code was not refused: %v", err)
	d.detail("the same code again → refused: %v", err)

	// --- local room and the owner's allowlist ------------------------------
	store, err := rooms.Open(ctx, filepath.Join(p.Data, daemon.RoomsDB), d.log)
	if err != nil {
		return err
	}
	if _, err := store.CreateProject(ctx, demoProject, "Demo"); err != nil {
		return err
	}
	room, err := store.CreateRoom(ctx, rooms.NewRoom{ID: "room-standup", ProjectID: demoProject, Name: "Team standup"})
	if err != nil {
		return err
	}
	for _, n := range []string{"Notes", "Kanban"} {
		id, err := store.AddApp(ctx, rooms.NewApp{ProjectID: demoProject, RoomID: room.ID, Name: n, Source: rooms.SourceSnippet,
			Files: map[string]string{"src/App.tsx": "export default function App() { return <p>" + n + "</p> }"}})
		if err != nil {
			return err
		}
		// App data the read tools must never return.
		if err := store.SetAppStorage(ctx, id, "secret-note", []byte("SDK-STORAGE-MUST-NOT-LEAK")); err != nil {
			return err
		}
	}
	store.Close()
	d.say("device: local room %q with 2 apps (and SDK storage the reads must never return)", room.ID)
	// What `roomrelay enable demo-project` writes, with a rate limit raised
	// for the latency loop below (the default is 120/min, burst 30).
	pol, err := allowlist.Parse([]byte("version 1\nproject " + demoProject + "\n  enabled yes\n  commands read_room list_room_apps read_room_app_status\n  rate 6000/min burst 100\n"))
	if err != nil {
		return err
	}
	if err := pol.Save(cli.PolicyPath(p.Config)); err != nil {
		return err
	}
	d.say("device owner: `roomrelay enable %s` → %s", demoProject, strings.Join(pol.Summary()[0].Commands, ", "))

	// --- the agent ---------------------------------------------------------
	var pool *sandbox.Pool
	runtimeOK := false
	dc := daemon.Config{ConfigDir: p.Config, StateDir: p.State, DataDir: p.Data, HubURL: hubURL, DeviceID: enr.DeviceID,
		Token: enr.Token, Version: cli.Version, OS: runtime.GOOS, Logger: d.log, Tick: 50 * time.Millisecond,
		OAuth: device.OAuthApprover{Paths: device.Paths{Config: p.Config, State: p.State, Data: p.Data}}}
	if !withSandbox {
		d.skip("the sandbox smoke-runs", "--no-sandbox")
	} else if d.e.Executable == "" {
		d.skip("the sandbox smoke-runs", "no path to this binary to start sandbox workers")
	}
	if withSandbox && d.e.Executable != "" {
		scfg, err := sandboxConfig()
		if err != nil {
			return err
		}
		t0 = time.Now()
		if err := sandbox.EnsureRuntime(ctx, scfg, func(s string) { d.detail("%s", s) }); err != nil {
			// Every smoke-run would fail: a step that did not behave, not a
			// note (--no-sandbox leaves the smoke-runs out on purpose).
			d.expect(false, "sandbox: the React runtime is unavailable, so no smoke-run can pass (--no-sandbox leaves them out): %v", err)
		} else {
			runtimeOK = true
			d.say("sandbox: React %s runtime verified against its pinned sha512 (%s)", sandbox.ReactVersion, since(t0))
		}
		scfg.Workers = 1
		if pool, err = sandbox.NewPool(scfg); err != nil {
			return err
		}
		defer pool.Close()
		dc.Sandbox = pool
	}
	t0 = time.Now()
	dm, err := daemon.Open(ctx, dc)
	if err != nil {
		return err
	}
	defer dm.Close()
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan error, 1)
	go func() { agentDone <- dm.Run(agentCtx) }()
	defer func() { stopAgent(); <-agentDone }()
	if err := waitFor(ctx, func() bool { return devicePresence(ctx, admin, enr.DeviceID) == hubapi.StateOnline }); err != nil {
		return fmt.Errorf("agent never came online: %w", err)
	}
	st := dm.Agent().Status()
	d.say("agent: outbound websocket up, hello/welcome done, session %s; hub shows it online (%s)", st.SessionID, since(t0))

	// --- commands through the hub -----------------------------------------
	callHub := func(name string, args any) (*relay.Result, time.Duration) {
		raw, _ := json.Marshal(args)
		t := time.Now()
		res, _, err := admin.Command(ctx, enr.DeviceID, hubapi.CommandRequest{ProjectID: demoProject, Name: name, Args: raw})
		if err != nil {
			return &relay.Result{Error: relay.Errorf(relay.CodeInternal, "%v", err)}, time.Since(t)
		}
		return res, time.Since(t)
	}
	res, took := callHub(relay.CmdReadRoom, map[string]any{"room_id": room.ID})
	d.expect(res.OK, "read_room failed: %+v", res.Error)
	d.say("cloud → hub → agent: read_room → %s (%s)", res.Result, took.Round(time.Microsecond))
	res, took = callHub(relay.CmdListRoomApps, map[string]any{"room_id": room.ID, "limit": 10})
	d.expect(res.OK && !strings.Contains(string(res.Result), "MUST-NOT-LEAK"), "list_room_apps: %+v", res.Error)
	d.say("cloud: list_room_apps → %d bytes, identity and launcher state only (%s)", len(res.Result), took.Round(time.Microsecond))
	var lat []time.Duration
	for range 50 {
		_, took := callHub(relay.CmdReadRoom, map[string]any{"room_id": room.ID})
		lat = append(lat, took)
	}
	slices.Sort(lat)
	d.detail("50 sequential read_room round trips: p50 %s, p99 %s", lat[len(lat)/2].Round(time.Microsecond), lat[len(lat)*99/100].Round(time.Microsecond))

	// --- refusals ----------------------------------------------------------
	files := examples.StandupTimer()
	proposal := map[string]any{"room_id": room.ID, "name": "Standup timer", "files": files,
		"idempotency_key": relay.SnippetKey(room.ID, "Standup timer", files)}
	res, _ = callHub(relay.CmdProposeRoomSnippetApp, proposal)
	d.expect(!res.OK && res.Error.Code == relay.CodeCommandNotAllowed, "propose before allowing: %+v", res)
	d.say("cloud: propose_room_snippet_app → refused %s: %s", res.Error.Code, res.Error.Message)
	res, _ = callHub(relay.CmdReadRoom, map[string]any{"room_id": "room-does-not-exist"})
	d.expect(!res.OK && res.Error.Code == relay.CodeNotFound, "missing room: %+v", res)
	d.detail("read_room on a room that is not there → %s", res.Error.Code)
	_ = pol.Disable(demoProject)
	_ = pol.Save(cli.PolicyPath(p.Config))
	dm.Poke(ctx)
	res, _ = callHub(relay.CmdReadRoom, map[string]any{"room_id": room.ID})
	d.expect(!res.OK && res.Error.Code == relay.CodeProjectNotEnabled, "disabled project: %+v", res)
	d.say("device owner: `roomrelay disable %s`; cloud: read_room → refused %s", demoProject, res.Error.Code)

	// --- the review gate ---------------------------------------------------
	_ = pol.Enable(demoProject, append(slices.Clone(allowlist.DefaultCommands), relay.CmdProposeRoomSnippetApp, relay.CmdSmokeRunRoomApp), nil)
	_ = pol.Save(cli.PolicyPath(p.Config))
	dm.Poke(ctx)
	d.say("device owner: `roomrelay enable %s --allow ...,propose_room_snippet_app,smoke_run_room_app`, picked up without restart", demoProject)
	res, took = callHub(relay.CmdProposeRoomSnippetApp, proposal)
	d.expect(res.OK, "proposal: %+v", res.Error)
	var pr daemon.ProposalResult
	_ = json.Unmarshal(res.Result, &pr)
	d.say("cloud: propose the seed's standup timer (%d files, %d bytes, key %s) → %s, proposal %s (%s)",
		len(files), len(files["src/App.tsx"])+len(files["src/styles.css"]), proposal["idempotency_key"], pr.State, pr.ProposalID, took.Round(time.Microsecond))
	res, _ = callHub(relay.CmdProposeRoomSnippetApp, proposal)
	var dup daemon.ProposalResult
	_ = json.Unmarshal(res.Result, &dup)
	d.expect(res.OK && dup.Duplicate && dup.ProposalID == pr.ProposalID, "retry was not a duplicate: %s", res.Result)
	d.detail("retry after a lost response, same content-derived key → duplicate=%v, same proposal, no second card", dup.Duplicate)
	res, _ = callHub(relay.CmdListRoomApps, map[string]any{"room_id": room.ID})
	d.expect(res.OK && !strings.Contains(string(res.Result), "Standup timer"), "pending proposal is in the launcher: %s", res.Result)
	d.detail("list_room_apps still shows 2 apps: nothing reaches the launcher before the owner approves")

	// The cloud caller long-polls the hub's HTTP API once; the hub answers
	// when the device's proposal_decided event arrives.
	decided := make(chan *hubapi.ProposalState, 1)
	go func() {
		ps, err := admin.WaitProposal(ctx, enr.DeviceID, pr.ProposalID, 30*time.Second)
		if err != nil {
			d.log.Warn("wait proposal", "err", err)
		}
		decided <- ps
	}()
	rs, err := rooms.Open(ctx, filepath.Join(p.Data, daemon.RoomsDB), d.log)
	if err != nil {
		return err
	}
	detail, err := rs.GetProposal(ctx, pr.ProposalID)
	if err != nil {
		rs.Close()
		return err
	}
	d.say("device owner: `roomrelay review show %s` → %d files in full, content hash %.16s…", pr.ProposalID, len(detail.Files), detail.ContentHash)
	clicked := time.Now()
	_, err = rs.ApproveProposal(ctx, pr.ProposalID, detail.ContentHash)
	rs.Close()
	if err != nil {
		return err
	}
	d.say("device owner: approve (bound to that hash)")
	pd := <-decided
	d.expect(pd != nil && pd.State == rooms.ProposalApproved, "the cloud never saw the approval: %+v", pd)
	if pd != nil {
		d.say("cloud: `GET /v1/devices/{id}/proposals/{pid}?wait=30s` returned with %s, instance %s — %s after the owner's click, zero polling (smoke-run included)", pd.State, pd.InstanceID, time.Since(clicked).Round(time.Microsecond))
		res, _ = callHub(relay.CmdReadRoomAppStatus, map[string]any{"room_id": room.ID, "instance_id": pd.InstanceID})
		d.expect(res.OK, "read_room_app_status: %+v", res.Error)
		var as rooms.AppStatus
		_ = json.Unmarshal(res.Result, &as)
		d.say("cloud: read_room_app_status → launcher %s, review %s, local build %s %s", as.Launcher.State, as.Review.State, as.Build.State, as.Build.Summary)
		d.expect(as.Launcher.State == rooms.LauncherActive && as.Review.State == rooms.ReviewApproved, "approved app not in the launcher: %+v", as)
		d.expect(pool == nil || !runtimeOK || as.Build.State == rooms.BuildOK, "smoke-run after approval: build %+v", as.Build)
		if pool != nil {
			res, took = callHub(relay.CmdSmokeRunRoomApp, map[string]any{"room_id": room.ID, "instance_id": pd.InstanceID})
			d.expect(res.OK || !runtimeOK, "smoke_run_room_app with the runtime in place: %+v", res.Error)
			if res.OK {
				d.say("cloud: smoke_run_room_app → %s (%s)", res.Result, took.Round(time.Microsecond))
			} else {
				d.say("cloud: smoke_run_room_app → %s: %s", res.Error.Code, res.Error.Message)
			}
		}
	}

	// --- the MCP front: a coding agent's view -------------------------------
	mcpCall, mcpSession, err := d.demoMCP(ctx, hubURL, admin)
	if err != nil {
		return err
	}
	defer mcpSession.Close()
	d.mcpStep(ctx, mcpCall, mcpSession, p.Data, room.ID, files, pool != nil && runtimeOK)
	d.desktopAppStep(ctx, mcpCall, filepath.Join(d.dir, "device"), p.Config, room.ID)
	d.oauthStep(ctx, hubURL, p.Config, room.ID)

	// --- audit -------------------------------------------------------------
	entries, err := dm.Audit().Query(audit.Filter{Limit: 4})
	if err != nil {
		return err
	}
	d.say("device: `roomrelay audit --limit 4` (every command, allowed or denied, hash-chained):")
	for _, en := range entries {
		code := en.ErrorCode
		if code == "" {
			code = "ok"
		}
		d.detail("#%d %s %s %s %s", en.Seq, en.Command, en.Room, en.Decision, code)
	}
	rep, err := dm.Audit().Verify()
	d.expect(err == nil && rep.OK(), "audit verify: %v %+v", err, rep.Problems)
	d.say("device: `roomrelay audit verify` → %d lines, chain intact=%v", rep.Lines, rep.OK())

	// --- offline -----------------------------------------------------------
	t0 = time.Now()
	stopAgent()
	if err := <-agentDone; err != nil && !errors.Is(err, context.Canceled) {
		d.expect(false, "agent stopped with %v", err)
	}
	agentDone <- nil // for the deferred stop
	dev, err := admin.Device(ctx, enr.DeviceID)
	if err != nil {
		return err
	}
	d.expect(dev.Presence.State == hubapi.StateOffline, "hub shows %s after the agent left", dev.Presence.State)
	d.say("agent stopped; hub shows the device %s, last seen %s (%s)", dev.Presence.State, dev.Presence.LastSeen.Local().Format(time.TimeOnly), since(t0))
	res, _ = callHub(relay.CmdReadRoom, map[string]any{"room_id": room.ID})
	d.expect(!res.OK && res.Error.Code == relay.CodeDeviceOffline, "offline device: %+v", res)
	d.detail("cloud: read_room now → %s", res.Error.Code)
	r := mcpCall(relay.CmdReadRoom, map[string]any{"room_id": room.ID})
	d.expect(r.IsError && strings.HasPrefix(mcpText(r), "device_offline"), "MCP read_room offline: %s", mcpText(r))
	d.say("MCP client: read_room now → %s", mcpText(r))

	fmt.Fprintln(d.e.Stdout)
	text, ok := summary(d.failures, d.skipped, time.Since(d.start).Round(time.Millisecond))
	fmt.Fprint(d.e.Stdout, text)
	if !ok {
		return silent(cli.ExitFailure)
	}
	return nil
}

func devicePresence(ctx context.Context, c *hubclient.Client, id string) string {
	dev, err := c.Device(ctx, id)
	if err != nil {
		return ""
	}
	return dev.Presence.State
}

// waitFor polls cond for up to 15 s.
func waitFor(ctx context.Context, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	return nil
}

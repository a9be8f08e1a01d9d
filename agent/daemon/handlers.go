package daemon

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// defaultListLimit is list_room_apps' page size when the caller gives none.
const defaultListLimit = 20

// guard decides every command before a handler sees it, in this order: the
// rate limit (refusals count too, so refused commands, each audited, come no
// faster than allowed ones; a project not served here shares one bucket and
// its refusal names no project), the policy (project enabled, command
// allowed, room listed, tightened bounds), then the command's schema and
// rules.
func (d *Daemon) guard(_ context.Context, cmd *relay.Command) error {
	if d.damaged != "" {
		e := relay.Errorf(relay.CodeInternal, "the device's local rooms database is damaged (%s); its owner must repair it: see `roomrelay status` on the device", d.damaged)
		e.Retryable = false // retrying cannot help
		return e
	}
	p := d.policy.Load()
	if err := d.limiter.Allow(p, cmd.ProjectID, cmd.Name); err != nil {
		return err
	}
	// The same command allowed before under this policy is allowed again
	// (verdicts.go); the key is built only for arguments small enough to keep.
	var k verdictKey
	small := len(cmd.Args) <= maxVerdictArgs
	if small {
		k = verdictKey{cmd.ProjectID, cmd.Name, string(cmd.Args)}
		if d.verdicts.allowed(p, k) {
			return nil
		}
	}
	err := p.Decide(cmd.ProjectID, cmd.Name, cmd.Args)
	if err == nil {
		err = relay.ValidateArgs(cmd.Name, cmd.Args)
	}
	if err == nil && small {
		d.verdicts.remember(p, k)
	}
	return err
}

// record appends every command that reached the agent to the audit log.
func (d *Daemon) record(cmd *relay.Command, res *relay.Result, dur time.Duration, refused bool) {
	e := audit.FromCommand(cmd, res, dur)
	// The guard's verdict comes with the result: a hidden room's not_found
	// looks like a missing one's from the result alone.
	if refused {
		e.Decision = audit.Denied
	}
	// Before the result leaves, the line is in the file either way. A
	// write's line is durable by then too; a read's is group-committed
	// within the log's sync window: a power cut may lose the last few
	// milliseconds of read lines, never a write's, and the chain verifies.
	appendLine := d.audit.Append
	if relay.ReadOnlyCommand(cmd.Name) {
		appendLine = d.audit.AppendGrouped
	}
	if written, err := appendLine(e); err != nil {
		d.log.Error("audit append failed", "command", cmd.ID, "err", err)
	} else {
		d.noteAuditMoved(written.Seq)
	}
	d.publishCommand(cmd, e) // after its audit line
}

// typed is a handler that reads its arguments as A. The guard, which runs
// before every handler, already checked them against the command's JSON
// Schema (relay.ValidateArgs), so here they are only decoded.
func typed[A any](fn func(ctx context.Context, cmd *relay.Command, a A) (any, error)) agent.Handler {
	return func(ctx context.Context, cmd *relay.Command) (any, error) {
		var a A
		args := cmd.Args
		if len(bytes.TrimSpace(args)) == 0 {
			args = json.RawMessage(`{}`)
		}
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, relay.Errorf(relay.CodeInvalidArgs, "args: %v", err)
		}
		return fn(ctx, cmd, a)
	}
}

// handlers is the daemon's half of relay's command table: one handler per
// row. registerHandlers refuses a row without one and a handler without a
// row, so the two cannot drift.
func (d *Daemon) handlers() map[string]agent.Handler {
	return map[string]agent.Handler{
		relay.CmdReadRoom: typed(func(ctx context.Context, cmd *relay.Command, a relay.ReadRoomArgs) (any, error) {
			return d.readRoom(ctx, cmd.ProjectID, a.RoomID)
		}),
		relay.CmdListRoomApps: typed(func(ctx context.Context, cmd *relay.Command, a relay.ListRoomAppsArgs) (any, error) {
			if a.Limit == 0 {
				a.Limit = defaultListLimit
			}
			return d.source().ListRoomApps(ctx, cmd.ProjectID, a.RoomID, a.Limit, a.Cursor)
		}),
		relay.CmdReadRoomAppStatus: typed(func(ctx context.Context, cmd *relay.Command, a relay.ReadRoomAppStatusArgs) (any, error) {
			return d.readAppStatus(ctx, cmd.ProjectID, a.RoomID, a.InstanceID)
		}),
		relay.CmdProposeRoomSnippetApp: typed(func(ctx context.Context, cmd *relay.Command, a relay.ProposeSnippetArgs) (any, error) {
			return d.propose(ctx, rooms.NewProposal{ProjectID: cmd.ProjectID, RoomID: a.RoomID, Kind: rooms.SourceSnippet,
				Name: a.Name, Files: a.Files, IdempotencyKey: a.IdempotencyKey, ProposedBy: caller(cmd)})
		}),
		relay.CmdProposeRoomRepoApp: typed(func(ctx context.Context, cmd *relay.Command, a relay.ProposeRepoArgs) (any, error) {
			return d.propose(ctx, rooms.NewProposal{ProjectID: cmd.ProjectID, RoomID: a.RoomID, Kind: rooms.SourceRepo,
				Name: a.Name, RepositoryID: a.RepositoryID, VersionID: a.VersionID, IdempotencyKey: a.IdempotencyKey, ProposedBy: caller(cmd)})
		}),
		relay.CmdSmokeRunRoomApp: typed(func(ctx context.Context, cmd *relay.Command, a relay.SmokeRunArgs) (any, error) {
			res, summary, err := d.smokeRunApp(ctx, cmd.ProjectID, a.RoomID, a.InstanceID)
			if err != nil {
				return nil, err
			}
			if !res.OK {
				return nil, relay.Errorf(relay.CodeSandboxFailed, "%s", summary)
			}
			return smokeSummary(res), nil
		}),
	}
}

// registerHandlers registers a handler for every row of relay's command
// table. A row without a handler, or a handler without a row, is a build
// defect: New fails, and so does every daemon test.
func (d *Daemon) registerHandlers() error {
	return registerTable(d.agent.Register, d.handlers())
}

func registerTable(register func(string, agent.Handler), hs map[string]agent.Handler) error {
	for _, c := range relay.Commands() {
		if hs[c.Name] == nil {
			return fmt.Errorf("daemon: no handler for command %s of relay's table", c.Name)
		}
	}
	for name := range hs {
		if !relay.KnownCommand(name) {
			return fmt.Errorf("daemon: handler %s is not in relay's command table", name)
		}
	}
	for _, c := range relay.Commands() {
		register(c.Name, hs[c.Name])
	}
	return nil
}

// caller is the command's Caller as the device keeps it: valid UTF-8,
// printable, cut to relay.MaxCallerBytes (it comes from the network).
func caller(cmd *relay.Command) string { return relay.CleanLine(cmd.Caller, relay.MaxCallerBytes) }

// ProposalResult is what the propose_* commands return.
type ProposalResult struct {
	ProposalID string `json:"proposal_id"`
	State      string `json:"state"` // pending_review, or approved/declined for a duplicate already decided
	Duplicate  bool   `json:"duplicate"`
	Message    string `json:"message"`
}

func (d *Daemon) propose(ctx context.Context, np rooms.NewProposal) (any, error) {
	// What callers may leave waiting for the owner is bounded (#24): the
	// store refuses a proposal beyond the policy's pending bounds.
	np.MaxPendingInRoom, np.MaxPendingInProject = d.policy.Load().Pending(np.ProjectID)
	if d.appMode() {
		// Checked against the app's directory as last sent: the app need
		// not be running for a proposal to wait for review.
		np.Provider = rooms.ProviderApp
	}
	p, dup, err := d.store.CreateProposal(ctx, np)
	if err != nil {
		return nil, err
	}
	if !dup {
		// Only here, on the create path: a retry (dup) or a restart never
		// notifies again, so each proposal is announced at most once.
		d.notifyProposal(ctx, p)
		d.publishProposal(p)
	}
	r := ProposalResult{ProposalID: p.ID, State: p.State, Duplicate: dup}
	if p.State == rooms.ProposalPending {
		r.State = "pending_review"
		r.Message = "waiting for the device owner to review it on the device (`roomrelay review`); it is not in the launcher until approved"
	}
	if dup {
		r.Message = "a proposal with this idempotency key and content already exists; no new card was created. " + r.Message
	}
	return r, nil
}

// SmokeSummary is the slim result of smoke_run_room_app: no console output,
// no source text.
type SmokeSummary struct {
	OK         bool                   `json:"ok"`
	Phase      string                 `json:"phase"`
	DurationMS float64                `json:"duration_ms"`
	Render     *sandbox.RenderSummary `json:"render,omitempty"`
	Clicks     int                    `json:"clicks"`
}

func smokeSummary(r *sandbox.Result) SmokeSummary {
	return SmokeSummary{OK: r.OK, Phase: string(r.Phase), DurationMS: r.DurationMS, Render: r.Render, Clicks: r.Clicks}
}

// buildSummary is one line for the build state and for sandbox_failed: the
// phase and where in the TSX it failed. The error's text goes with it only
// when withText: an app the owner added on the device is not the cloud's to
// read, and an error message can quote its source ("OWNER_SECRET is not
// defined"), so the cloud then gets the error class and location only.
func buildSummary(r *sandbox.Result, withText bool) string {
	if r.OK {
		n := 0
		if r.Render != nil {
			n = r.Render.ElementCount
		}
		return fmt.Sprintf("rendered %d elements, %d clicks, in %.1f ms", n, r.Clicks, r.DurationMS)
	}
	msg := "failed in phase " + string(r.Phase)
	if e := r.Error; e != nil {
		if e.File != "" {
			msg += fmt.Sprintf(" at %s:%d:%d", e.File, e.Line, e.Column)
		}
		if withText {
			msg += ": " + e.Message
		} else {
			msg += ": " + errorClass(e.Message) + " (details only on the device: `roomrelay snippet check`)"
		}
	} else if len(r.BuildErrors) > 0 {
		b := r.BuildErrors[0]
		msg += fmt.Sprintf(" at %s:%d:%d", b.File, b.Line, b.Column)
		if withText {
			msg += ": " + b.Text
		} else {
			msg += ": build error (details only on the device)"
		}
	}
	return msg
}

// errorClass is the JavaScript error's class ("ReferenceError") from its
// message, or "error".
func errorClass(msg string) string {
	name, _, ok := strings.Cut(msg, ":")
	if ok && name != "" && len(name) <= 40 && strings.HasSuffix(name, "Error") && !strings.ContainsFunc(name, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '$')
	}) {
		return name
	}
	return "error"
}

// smokeRunApp is smoke_run_room_app: it runs an app's exact current
// content in the sandbox and records the outcome as its build state. The
// files come from the provider (roomrelay's store, or the desktop app's
// apps.files, checked against its content hash). Pending proposals are not
// apps, so they are not_found here.
// The summary is the line recorded and shown to the cloud (buildSummary,
// with the error text only for apps that came from a cloud proposal).
func (d *Daemon) smokeRunApp(ctx context.Context, projectID, roomID, instanceID string) (*sandbox.Result, string, error) {
	src, appRoom := d.source(), d.appMode()
	files, err := src.AppFiles(ctx, projectID, roomID, instanceID)
	if err != nil {
		return nil, "", err
	}
	st, err := src.ReadRoomAppStatus(ctx, projectID, roomID, instanceID)
	if err != nil {
		return nil, "", err
	}
	fromCloud := st.Review.State == rooms.ReviewApproved
	if len(files) == 0 {
		return nil, "", relay.Errorf(relay.CodeInvalidArgs, "app %q is a repository app: it has no snippet files to smoke-run on the device", instanceID)
	}
	res, err := d.runSandbox(ctx, files)
	if err != nil {
		return nil, "", err
	}
	b := buildOf(res, fromCloud)
	if err := d.recordBuild(ctx, appRoom, projectID, roomID, instanceID, relay.ContentHash(files), b); err != nil {
		return nil, "", err
	}
	return res, b.Summary, nil
}

// smokeApproved smoke-runs a just-approved snippet from roomrelay's own
// proposal store: the exact files the owner approved, for a builtin room
// and for a room the desktop app provides alike (never the app's copy,
// which it may not have installed yet). The outcome is recorded where
// read_room_app_status reads it.
func (d *Daemon) smokeApproved(ctx context.Context, p rooms.Proposal) (*sandbox.Result, error) {
	det, err := d.store.GetProposal(ctx, p.ID)
	if err != nil {
		return nil, err
	}
	if got := relay.ContentHash(det.Files); got != p.ContentHash {
		return nil, fmt.Errorf("the stored files of proposal %s hash to %s, not the approved %s", p.ID, got, p.ContentHash)
	}
	prov, err := d.store.RoomProvider(ctx, p.RoomID)
	if err != nil {
		return nil, err
	}
	res, err := d.runSandbox(ctx, det.Files)
	if err != nil {
		return nil, err
	}
	// Approved from a cloud proposal: the error text may go with it.
	return res, d.recordBuild(ctx, prov == rooms.ProviderApp, p.Project, p.RoomID, p.InstanceID, p.ContentHash, buildOf(res, true))
}

// runSandbox smoke-runs files in the device's sandbox.
func (d *Daemon) runSandbox(ctx context.Context, files map[string]string) (*sandbox.Result, error) {
	if d.cfg.Sandbox == nil {
		if d.cfg.NoSandboxReason != "" {
			return nil, relay.Errorf(relay.CodeSandboxFailed, "this device runs no sandbox: %s", d.cfg.NoSandboxReason)
		}
		return nil, relay.Errorf(relay.CodeSandboxFailed, "this device runs no sandbox")
	}
	if d.cfg.EnsureRuntime != nil {
		if err := d.cfg.EnsureRuntime(ctx); err != nil {
			return nil, relay.Errorf(relay.CodeSandboxFailed, "the sandbox's JS runtime is unavailable on the device: %v", err)
		}
	}
	res, err := d.cfg.Sandbox.SmokeRun(ctx, files)
	if err != nil {
		return nil, fmt.Errorf("smoke-run: %w", err)
	}
	return res, nil
}

// buildOf is a smoke-run's outcome as a build state.
func buildOf(res *sandbox.Result, fromCloud bool) rooms.Build {
	state := rooms.BuildOK
	if !res.OK {
		state = rooms.BuildFailed
	}
	return rooms.Build{State: state, Phase: string(res.Phase), Summary: buildSummary(res, fromCloud), CheckedAt: time.Now().UTC()}
}

// recordBuild keeps a smoke-run's outcome and publishes build_state. A
// builtin room's app keeps it in its row. For a room the desktop app
// provides roomrelay keeps its own record (read_room_app_status reads it
// when the app reports no build state: an app without the build_state
// capability never does), and an app with the capability is told too, best
// effort (it may not have installed the app yet).
func (d *Daemon) recordBuild(ctx context.Context, appRoom bool, projectID, roomID, instanceID, contentHash string, b rooms.Build) error {
	if !appRoom {
		if err := d.store.SetBuildState(ctx, instanceID, b); err != nil {
			return err
		}
	} else {
		if err := d.store.RecordAppBuild(ctx, instanceID, roomID, contentHash, b); err != nil {
			return err
		}
		if err := d.app.SetBuildState(ctx, projectID, roomID, instanceID, contentHash, b); err != nil {
			d.log.Info("the desktop app was not told the build state; roomrelay's record stands", "instance_id", instanceID, "err", err)
		}
	}
	d.pub.Publish(events.BuildState{Project: projectID, RoomID: roomID, InstanceID: instanceID,
		ContentHash: contentHash, State: b.State, Phase: b.Phase, Summary: b.Summary, CheckedAt: b.CheckedAt})
	return nil
}

// storeChanged reports whether anyone committed to the rooms database since
// the last look. It asks SQLite's commit counter, not the files' stamps: a
// stat can land after a commit's WAL frames are written but before SQLite
// publishes the commit (it fsyncs in between), so the query after it missed
// the commit and every later stat saw the same stamp; the decision then
// waited for decisionRecheck (TestPollSeesEveryCommit). Called with
// decideMu held.
func (d *Daemon) storeChanged(ctx context.Context) bool {
	v, err := d.store.CommitCounter(ctx)
	if err != nil {
		d.haveVersion = false
		return true
	}
	changed := !d.haveVersion || v != d.storeVersion
	d.storeVersion, d.haveVersion = v, true
	return changed
}

// publishDecisions sends a proposal_decided event for each decision the
// owner made that the hub has not been told of, smoke-running approved
// snippets first so the event and the build state agree. Unless force is
// set it queries only when the store's files changed.
func (d *Daemon) publishDecisions(ctx context.Context, force bool) {
	d.decideMu.Lock()
	defer d.decideMu.Unlock()
	if !d.storeChanged(ctx) && !force && time.Since(d.lastQuery) < decisionRecheck {
		return
	}
	d.lastQuery = time.Now()
	d.stats.decisionQueries.Add(1)
	d.announceRooms(ctx) // the store changed: rooms may have been added or renamed
	ps, err := d.store.UnannouncedDecisions(ctx)
	if err != nil {
		d.log.Warn("reading review decisions failed", "err", err)
		return
	}
	if len(ps) > 0 {
		d.installer.Kick() // an approval of an app room waits in the install queue
	}
	for _, p := range ps {
		// An approved snippet is smoke-run from the store's copy, in a
		// builtin room and in one the desktop app provides alike.
		if p.State == rooms.ProposalApproved && p.Kind == rooms.SourceSnippet && d.cfg.Sandbox != nil {
			// The smoke-run (seconds, maybe a runtime fetch) runs on the
			// smoker Run owns, which announces the decision after it, so
			// the cloud learns of the approval with its build state; this
			// loop, which also reloads the policy, never waits for it.
			if !d.smoking[p.ID] {
				select {
				case d.smokeCh <- p:
					d.smoking[p.ID] = true
				default: // the smoker is busy: the next look hands it over
					d.haveVersion = false
				}
			}
			continue
		}
		if !d.announceDecision(ctx, p) {
			return // announceDecision made the next look query again
		}
	}
}

// smoker smoke-runs approved snippets handed over by publishDecisions, one
// at a time, then announces each decision. Owned by Run.
func (d *Daemon) smoker(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case p := <-d.smokeCh:
			if res, err := d.smokeApproved(ctx, p); err != nil {
				d.log.Warn("smoke-run after approval failed to run", "proposal", p.ID, "err", err)
			} else {
				d.log.Info("smoke-run after approval", "proposal", p.ID, "ok", res.OK, "phase", res.Phase)
			}
			d.decideMu.Lock()
			d.announceDecision(ctx, p)
			delete(d.smoking, p.ID)
			d.decideMu.Unlock()
		}
	}
}

// announceDecision queues the proposal_decided event and marks it so it is
// queued once; false if the outbox refused it (retried on a later look).
// Called with decideMu held.
func (d *Daemon) announceDecision(ctx context.Context, p rooms.Proposal) bool {
	data, _ := json.Marshal(relay.ProposalDecided{ProposalID: p.ID, Project: p.Project, RoomID: p.RoomID,
		State: p.State, InstanceID: p.InstanceID, DecidedAt: p.DecidedAt})
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventProposalDecided, Time: time.Now().UTC(), Data: data}); err != nil {
		d.log.Warn("proposal_decided event not queued; will retry", "proposal", p.ID, "err", err)
		d.haveVersion = false // the next look queries again, though nothing was committed
		return false
	}
	d.publishDecided(p)
	// The outbox persisted the event; mark it so it is queued once.
	if err := d.store.MarkAnnounced(ctx, p.ID); err != nil {
		d.log.Warn("marking decision announced failed", "proposal", p.ID, "err", err)
	}
	return true
}

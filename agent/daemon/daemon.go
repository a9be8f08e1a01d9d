// Package daemon assembles the device agent: it opens the local Room store,
// loads the owner's allowlist, wires the policy guard, the audit log and the
// room command handlers into an agent.Agent, and runs the housekeeping loop
// that reloads the policy when its file changes and tells the hub about the
// owner's review decisions. A new proposal is announced to the desktop user
// (agent/notify) unless the policy says "notify off". `roomrelay run` and
// the demo both use it.
package daemon

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/notify"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

// File names inside the directories the daemon is given: the agent
// package's, named here too for the daemon's callers.
const (
	PolicyFile    = agent.PolicyFile
	ReconnectFile = agent.ReconnectFile
	RoomsDB       = agent.RoomsDB
	AuditDir      = agent.AuditDir
)

// SmokeRunner runs a snippet in the sandbox (a *sandbox.Pool).
type SmokeRunner interface {
	SmokeRun(ctx context.Context, files map[string]string) (*sandbox.Result, error)
}

// Config is what the CLI hands the daemon.
type Config struct {
	ConfigDir, StateDir, DataDir string
	// ProviderInFlight bounds the requests in flight to the desktop app
	// (0: provider.DefaultMaxInFlight); `roomrelay run --provider-in-flight`.
	ProviderInFlight int

	HubURL, DeviceID, Token string
	Version, OS             string
	// TLSConfig is the agent's client TLS configuration (a private CA);
	// nil uses the system's roots.
	TLSConfig *tls.Config

	// Sandbox smoke-runs approved snippets; nil leaves build state "none"
	// and answers smoke_run_room_app with sandbox_failed.
	Sandbox SmokeRunner
	// NoSandboxReason says why Sandbox is nil, for the error a
	// smoke_run_room_app caller gets (default: "this device runs no sandbox").
	NoSandboxReason string
	// EnsureRuntime, when set, is called before a smoke-run so a missing
	// JS runtime is fetched once instead of failing every run.
	EnsureRuntime func(ctx context.Context) error

	// Tick is how often the policy file and review decisions are checked
	// where no change notification exists (default 1 s; Linux uses inotify).
	Tick time.Duration
	// pollOnly makes housekeep poll every Tick even where inotify exists:
	// tests run macOS's and Windows' path on Linux with it.
	pollOnly bool
	// auditEvery replaces auditHeadEvery in tests.
	auditEvery time.Duration
	// Agent lets tests adjust the agent's settings (clock, backoff).
	Agent func(*agent.Config)
	// Notifier tells the desktop user a proposal waits for review (unless
	// the policy says "notify off"); nil: the platform's, notify.Desktop.
	Notifier notify.Notifier
	// Events, when set, receives every event local clients are told,
	// beside the local API's ring.
	Events events.Publisher

	// RuntimeDir is the user's runtime dir for the local API's socket ("":
	// the state dir; the CLI leaves it empty under --home). NoLocalAPI
	// runs without the local API (in-process tests of several agents).
	RuntimeDir string
	// SocketShortDir is a short directory of the user's own (the runtime
	// dir, else the home) for the socket when its usual path is too long
	// for a socket address (localapi.ListenConfig.ShortDir).
	SocketShortDir string
	NoLocalAPI     bool
	// Enrolled lists the projects the hub enrolled the device for (the
	// CLI reads config.json), for the local API's project list.
	Enrolled func() []string
	// Provider reports the room provider's state and ProviderHandler
	// serves its websocket at /localapi/v1/provider (agent/provider).
	Provider        localapi.ProviderStater
	ProviderHandler http.Handler
	// OAuth lets the local API approve an MCP client's sign-in with the
	// device token (agent/device.OAuthApprover); nil answers unavailable.
	OAuth localapi.OAuthApprover

	Logger *slog.Logger
}

// Daemon is one running device agent.
type Daemon struct {
	cfg    Config
	log    *slog.Logger
	agent  *agent.Agent
	store  *rooms.Store
	audit  *audit.Log
	anchor auditAnchor // what the hub was last told of the audit head (Run's goroutine)
	// auditMoved is signalled (never blocking) after an audit line is
	// written, so housekeep arms its audit_head timer only when there is a
	// head to announce: an idle agent keeps no minute tick for it.
	auditMoved   chan struct{}
	auditWritten atomic.Uint64 // the seq of the last audit line written
	limiter      *allowlist.Limiter
	verdicts     verdicts // the guard's allowed commands (verdicts.go)
	lock         *os.File // the state dir's lock, held while open
	damaged      string   // why the rooms store failed its check at open; "" if it passed
	notes        *notify.Queue

	prov      *provider.Server    // the desktop app's websocket (agent/localapi mounts it)
	app       *provider.App       // reads through the connected app
	installer *provider.Installer // approved proposals of app rooms → the app

	ring *localapi.Events // what local apps are told; published into even without the API
	// pub is the one publisher of local events: the ring, and Config.Events
	// when set. The daemon, the local API's routes, the provider and the
	// installer publish through it.
	pub events.Publisher
	api *localapi.Server // nil with NoLocalAPI

	policy      atomic.Pointer[allowlist.Policy]
	policyMu    sync.Mutex // serialises reloads; guards policyStamp
	policyStamp fileStamp

	decideMu     sync.Mutex          // one publisher of review decisions at a time; guards storeVersion, haveVersion, lastQuery, smoking
	smokeCh      chan rooms.Proposal // approved snippets for the smoker (Run)
	smoking      map[string]bool     // proposal ids handed to the smoker, not yet announced
	storeVersion int64               // the store's commit counter at the last look
	haveVersion  bool
	lastQuery    time.Time

	dirMu   sync.Mutex
	lastDir []relay.RoomEntry // the directory last queued for the hub; nil: unknown, or a hello went out since

	stats struct{ policyLoads, decisionQueries, auditHeads atomic.Int64 }
}

// decisionRecheck bounds how long a decision could wait if a store change
// slipped past the file-stamp check (same size and mtime).
const decisionRecheck = time.Minute

// safetyNet is housekeep's tick where inotify tells it of every change: a
// look at the policy and the store in case an event was lost (an inotify
// queue overflow). Every timer expiry of an idle agent costs its process a
// burst of the runtime's sysmon wakeups (bench/idle), so it is rare.
const safetyNet = 10 * time.Minute

// Open opens the stores and builds the agent; Run starts it.
func Open(ctx context.Context, cfg Config) (*Daemon, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Tick <= 0 {
		cfg.Tick = time.Second
	}
	for _, d := range []string{cfg.ConfigDir, cfg.StateDir, cfg.DataDir} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("create %s: %w", d, err)
		}
	}
	if cfg.Notifier == nil {
		cfg.Notifier = notify.Desktop(notify.Config{})
	}
	d := &Daemon{cfg: cfg, log: cfg.Logger, limiter: allowlist.NewLimiter(time.Now),
		smokeCh: make(chan rooms.Proposal, 16), smoking: map[string]bool{}, auditMoved: make(chan struct{}, 1),
		notes: notify.NewQueue(notify.QueueConfig{Notifier: cfg.Notifier, Logger: cfg.Logger}),
		ring:  localapi.NewEvents("", 0)}
	d.pub = d.ring
	if cfg.Events != nil {
		d.pub = events.Tee{d.ring, cfg.Events}
	}
	lock, err := lockStateDir(cfg.StateDir)
	if err != nil {
		return nil, err
	}
	d.lock = lock
	if err := d.reloadPolicy(); err != nil {
		d.Close()
		return nil, err
	}
	store, err := rooms.Open(ctx, filepath.Join(cfg.DataDir, RoomsDB), cfg.Logger)
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open local rooms: %w", err)
	}
	d.store = store
	d.newProvider()
	al, err := audit.Open(filepath.Join(cfg.StateDir, AuditDir), audit.Options{})
	if err != nil {
		d.Close()
		return nil, fmt.Errorf("open audit log: %w", err)
	}
	d.audit = al
	acfg := agent.Config{
		HubURL: cfg.HubURL, DeviceID: cfg.DeviceID, Token: cfg.Token, StateDir: cfg.StateDir,
		Version: cfg.Version, OS: cfg.OS, Logger: cfg.Logger, TLSConfig: cfg.TLSConfig,
		Policy:   func() []relay.ProjectPolicy { return d.policy.Load().Summary() },
		Rooms:    d.directory,
		Provider: d.providerState,
		Guard:    d.guard,
		// The audit anchor (audithead.go).
		AuditHead: d.auditHead,
		Audit:     d.record,

		OnStatus: d.publishStatus,

		MaxInFlight: d.policy.Load().InFlight(),
	}
	// A damaged store is found now, not by every command: the agent still
	// connects (the hub shows it online), status names the problem, and
	// every command is refused without a retry hint.
	if err := store.QuickCheck(ctx); err != nil {
		d.damaged = err.Error()
		d.log.Error("the local rooms database is damaged; every command is refused until it is repaired", "err", err)
		acfg.Notes = append(acfg.Notes, "the local rooms database "+filepath.Join(cfg.DataDir, RoomsDB)+" is damaged ("+err.Error()+"): every command is refused; restore it from a backup, or move it away to start empty")
	}
	if cfg.Sandbox == nil && cfg.NoSandboxReason != "" {
		acfg.Notes = append(acfg.Notes, "no sandbox: "+cfg.NoSandboxReason+"; approved snippets are not smoke-run")
	}
	if cfg.Agent != nil {
		cfg.Agent(&acfg)
	}
	a, err := agent.New(acfg)
	if err != nil {
		d.Close()
		return nil, err
	}
	d.agent = a
	if err := d.registerHandlers(); err != nil {
		d.Close()
		return nil, err
	}
	if !cfg.NoLocalAPI {
		if err := d.openLocalAPI(); err != nil {
			d.Close()
			return nil, err
		}
	}
	return d, nil
}

// Agent is the underlying connection agent (status, sleep announcements).
func (d *Daemon) Agent() *agent.Agent { return d.agent }

// Store is the local Room store, for the demo and tests.
func (d *Daemon) Store() *rooms.Store { return d.store }

// Audit is the audit log.
func (d *Daemon) Audit() *audit.Log { return d.audit }

// Policy is the policy in force.
func (d *Daemon) Policy() *allowlist.Policy { return d.policy.Load() }

// Run runs the agent and the housekeeping loop until ctx ends. It returns
// the agent's error (agent.ErrNeedsEnrollment when the hub refused the token).
func (d *Daemon) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	if d.api != nil {
		wg.Go(func() {
			if err := d.api.Run(ctx); err != nil {
				d.log.Error("local api stopped", "err", err)
			}
		})
	}
	wg.Add(4)
	go func() {
		defer wg.Done()
		d.housekeep(ctx)
	}()
	go func() {
		defer wg.Done()
		d.installer.Run(ctx)
	}()
	go func() {
		defer wg.Done()
		d.smoker(ctx)
	}()
	go func() {
		defer wg.Done()
		d.notes.Run(ctx)
	}()
	err := d.agent.Run(ctx)
	cancel()
	d.prov.Close() // the app's connection ends with the agent (1001)
	wg.Wait()
	return err
}

// Close releases the stores. Call after Run returned.
func (d *Daemon) Close() error {
	var errs []error
	if d.api != nil {
		errs = append(errs, d.api.Close()) // a listener Run never served
	}
	if d.audit != nil {
		errs = append(errs, d.audit.Close())
	}
	if d.store != nil {
		errs = append(errs, d.store.Close())
	}
	if d.lock != nil {
		errs = append(errs, d.lock.Close()) // releases the lock
		d.lock = nil
	}
	return errors.Join(errs...)
}

// housekeep reloads the policy when its file changes and publishes review
// decisions made by the owner (in this or another process: the review CLI
// and page write the store directly). On Linux it sleeps on inotify and
// wakes on a change; elsewhere, or when inotify is unavailable, it polls
// every Tick.
func (d *Daemon) housekeep(ctx context.Context) {
	every := d.cfg.Tick
	var changes <-chan struct{} // nil: only the ticker
	w, err := newChangeWatcher(d.cfg.ConfigDir, d.cfg.DataDir)
	if err == nil && d.cfg.pollOnly {
		w.Close()
		err = errors.New("polling asked for (pollOnly)")
	}
	if err != nil {
		d.log.Debug("polling for policy and review changes", "every", every, "reason", err)
	} else {
		every = safetyNet
		changes = w.C()
		var wg sync.WaitGroup
		wg.Add(1)
		go func() { defer wg.Done(); w.run() }()
		defer func() { w.Close(); wg.Wait() }()
	}
	t := time.NewTicker(every)
	defer t.Stop()
	d.publishDecisions(ctx, true)
	// A change event can arrive before another process's commit is visible
	// to readers (SQLite publishes it in the shared-memory index, which
	// inotify does not see), so every burst of events is checked again once
	// it settled.
	//
	// The first look gets the same second looks: a commit in flight while
	// the watch was added wrote its WAL frames before it (no event) and
	// became visible after the look.
	settle := time.After(settleSteps[0])
	step := 0
	// The audit_head timer runs only while a moved head waits for its
	// announcement (at most one per auditHeadEvery).
	var auditDue <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			d.poke(ctx, false)
			d.announceAuditHead(ctx)
		case <-d.auditMoved:
			if wait, ok := d.auditDelay(); ok && auditDue == nil {
				auditDue = time.After(wait)
			}
		case <-auditDue:
			auditDue = nil
			d.announceAuditHead(ctx)
			if wait, ok := d.auditDelay(); ok {
				auditDue = time.After(wait) // not durable yet, or failed to queue
			}
		case <-changes:
			d.poke(ctx, true)
			step = 0
			settle = time.After(settleSteps[0])
		case <-settle:
			d.poke(ctx, true)
			settle = nil
			if step++; step < len(settleSteps) {
				settle = time.After(settleSteps[step] - settleSteps[step-1])
			}
		}
	}
}

// settleSteps are when, after the last change event of a burst, the store
// is looked at again: soon (the commit usually shows within milliseconds),
// then later for a slow writer.
var settleSteps = []time.Duration{5 * time.Millisecond, 25 * time.Millisecond, 100 * time.Millisecond, 250 * time.Millisecond}

// Poke reloads the policy if its file changed and publishes pending review
// decisions now, instead of at the next change event or tick. An idle poll
// tick (systems without inotify) costs a stat of the policy file and a read
// of SQLite's commit counter (shared memory): no file is read and no query runs.
func (d *Daemon) Poke(ctx context.Context) { d.poke(ctx, true) }

// poke is Poke; without force the store is queried only if its files changed.
func (d *Daemon) poke(ctx context.Context, force bool) {
	if err := os.Remove(filepath.Join(d.cfg.ConfigDir, ReconnectFile)); err == nil {
		d.log.Info("asked to reconnect now (roomrelay reconnect)")
		d.agent.RetryNow()
	}
	d.policyMu.Lock()
	changed, err := d.policyChanged()
	if err == nil && changed {
		err = d.reloadPolicy()
	}
	d.policyMu.Unlock()
	switch {
	case err != nil:
		d.log.Warn("policy file refused; keeping the policy in force", "err", err)
	case changed:
		d.announcePolicy(ctx)
		d.announceRooms(ctx)
		d.announceProvider()
		if d.prov != nil {
			d.prov.Reselect() // an app no longer selected is told so (4004)
		}
	}
	d.publishDecisions(ctx, force)
}

func (d *Daemon) announcePolicy(ctx context.Context) {
	sum := d.policy.Load().Summary()
	d.log.Info("policy reloaded", "projects", len(sum))
	rev := ""
	if _, r, err := allowlist.LoadRevision(d.policyPath()); err == nil {
		rev = r
	}
	d.pub.Publish(events.PolicyChanged{Projects: sum, Revision: rev})
	data, _ := json.Marshal(relay.PolicyChanged{Policy: sum})
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventPolicyChanged, Time: time.Now().UTC(), Data: data}); err != nil {
		d.log.Warn("policy_changed event not queued", "err", err)
	}
}

type fileStamp struct {
	mod  time.Time
	size int64
	ok   bool
}

func (d *Daemon) policyPath() string { return filepath.Join(d.cfg.ConfigDir, PolicyFile) }

func statStamp(path string) (fileStamp, error) {
	st, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return fileStamp{}, nil
	}
	if err != nil {
		return fileStamp{}, err
	}
	return fileStamp{mod: st.ModTime(), size: st.Size(), ok: true}, nil
}

func (d *Daemon) policyChanged() (bool, error) {
	s, err := statStamp(d.policyPath())
	if err != nil {
		return false, err
	}
	return s != d.policyStamp, nil
}

// reloadPolicy loads the policy file; a missing file is deny-all. Only the
// local file is ever read: nothing from the network reaches this.
func (d *Daemon) reloadPolicy() error {
	stamp, err := statStamp(d.policyPath())
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	p, err := allowlist.Load(d.policyPath())
	if err != nil {
		return fmt.Errorf("policy: %w", err)
	}
	d.policy.Store(p)
	if d.agent != nil {
		d.agent.SetMaxInFlight(p.InFlight())
	}
	d.policyStamp = stamp
	d.stats.policyLoads.Add(1)
	return nil
}

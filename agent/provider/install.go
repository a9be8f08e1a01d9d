package provider

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// InstallChanged is the data of an install_changed event.
type InstallChanged struct {
	ProposalID   string `json:"proposal_id"`
	InstanceID   string `json:"instance_id"`
	Project      string `json:"project"`
	RoomID       string `json:"room_id"`
	InstallState string `json:"install_state"`
	Error        string `json:"error,omitempty"`
}

// Installer delivers approved proposals of app-provided rooms to the
// desktop app (apps.install) until it acknowledges or refuses each one.
// Delivery is at least once (an answer lost to a crash is delivered again);
// the app's dedupe by proposal id makes it exactly once in effect.
type Installer struct {
	store  *rooms.Store
	app    *App
	events Events
	log    *slog.Logger
	kick   chan struct{}

	// Backoff bounds of a delivery that failed in transit (tests shorten).
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one apps.install call.
	Timeout time.Duration
	// Installed, when set, is called after the app acknowledged an install
	// (the daemon hands an app with build_state the smoke-run it recorded
	// before the app had the app), with a context bounded by Timeout.
	Installed func(ctx context.Context, j rooms.InstallJob)
}

// NewInstaller builds the install queue over store, delivering through s.
func NewInstaller(store *rooms.Store, s *Server, events Events, logger *slog.Logger) *Installer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Installer{store: store, app: s.App(), events: events, log: logger, kick: make(chan struct{}, 1),
		MinBackoff: time.Second, MaxBackoff: 5 * time.Minute, Timeout: 30 * time.Second}
}

// Kick asks for a delivery round now (an approval, an app's hello).
func (in *Installer) Kick() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// Run delivers until ctx ends: at start, on each Kick, and on the backoff
// timer while deliveries fail in transit.
func (in *Installer) Run(ctx context.Context) {
	var retry <-chan time.Time
	failures := 0
	in.Kick()
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.kick:
		case <-retry:
		}
		retry = nil
		if !in.round(ctx) {
			failures++
			d := in.MinBackoff << min(failures-1, 20)
			if d > in.MaxBackoff || d <= 0 {
				d = in.MaxBackoff
			}
			retry = time.After(d)
			continue
		}
		failures = 0
	}
}

// round offers every pending install once; false when one failed in transit
// (retry later). With no app connected nothing is tried (the app's hello
// kicks the next round).
func (in *Installer) round(ctx context.Context) bool {
	if _, ok := in.app.s.Connected(); !ok {
		return true
	}
	jobs, err := in.store.PendingInstalls(ctx)
	if err != nil {
		in.log.Warn("reading the install queue failed", "err", err)
		return false
	}
	ok := true
	for _, j := range jobs {
		if ctx.Err() != nil {
			return true
		}
		if !in.deliver(ctx, j) {
			ok = false
		}
	}
	return ok
}

// deliver offers one install; false when it should be retried.
func (in *Installer) deliver(ctx context.Context, j rooms.InstallJob) bool {
	if err := in.store.NoteInstallAttempt(ctx, j.ID); err != nil {
		in.log.Warn("install attempt not recorded", "proposal", j.ID, "err", err)
		return false
	}
	cctx, cancel := context.WithTimeout(ctx, in.Timeout)
	err := in.app.Install(cctx, Install{ProposalID: j.ID, InstanceID: j.InstanceID, Project: j.Project, RoomID: j.RoomID,
		Name: j.Name, Kind: j.Kind, Files: j.Files, RepositoryID: j.RepositoryID, VersionID: j.VersionID,
		ContentHash: j.ContentHash, ApprovedAt: j.DecidedAt})
	cancel()
	state, why := rooms.InstallInstalled, ""
	if err != nil {
		var re *relay.Error
		if !errors.As(err, &re) || (re.Code != relay.CodeNotFound && re.Code != relay.CodeInvalidArgs) {
			in.log.Info("install not delivered; will retry", "proposal", j.ID, "attempt", j.Attempts+1, "err", err)
			return false
		}
		state, why = rooms.InstallFailed, string(re.Code)+": the desktop app refused the install ("+re.Message+")"
	}
	if err := in.store.FinishInstall(ctx, j.ID, state, why); err != nil {
		in.log.Warn("install outcome not recorded; it is delivered again (the app dedupes by proposal id)", "proposal", j.ID, "err", err)
		return false
	}
	in.log.Info("install", "proposal", j.ID, "instance_id", j.InstanceID, "state", state, "why", why)
	if in.events != nil {
		in.events.Publish(EventInstallChanged, InstallChanged{ProposalID: j.ID, InstanceID: j.InstanceID, Project: j.Project,
			RoomID: j.RoomID, InstallState: state, Error: why})
	}
	if state == rooms.InstallInstalled && in.Installed != nil {
		cctx, cancel := context.WithTimeout(ctx, in.Timeout)
		in.Installed(cctx, j)
		cancel()
	}
	return true
}

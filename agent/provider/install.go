package provider

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// Installer delivers approved proposals of app-provided rooms to the
// desktop app (apps.install) until it acknowledges or refuses each one.
// Delivery is at least once (an answer lost to a crash is delivered again);
// the app's dedupe by proposal id makes it exactly once in effect.
//
// Each pending proposal has its own retry schedule, kept by Run: after n
// failed deliveries on one connection it waits MinBackoff·2^(n-1) (at most
// MaxBackoff). A Kick (an approval, any store change) delivers only what is
// due, so nothing but a new connection (the app's next hello) shortens a
// wait. Up to MaxInFlight installs are in flight at once, at most one per
// room, each room's in approval order.
type Installer struct {
	store  *rooms.Store
	app    *App
	events events.Publisher
	log    *slog.Logger
	kick   chan struct{}

	// Backoff bounds of a delivery that failed (tests shorten).
	MinBackoff, MaxBackoff time.Duration
	// Timeout bounds one apps.install call.
	Timeout time.Duration
	// MaxInFlight bounds the installs delivered at once (default 4).
	MaxInFlight int
	// Installed, when set, is called after the app acknowledged an install
	// (the daemon hands an app with build_state the smoke-run it recorded
	// before the app had the app), with a context bounded by Timeout.
	Installed func(ctx context.Context, j rooms.InstallJob)
}

// NewInstaller builds the install queue over store, delivering through s.
func NewInstaller(store *rooms.Store, s *Server, pub events.Publisher, logger *slog.Logger) *Installer {
	if logger == nil {
		logger = slog.New(slog.DiscardHandler)
	}
	return &Installer{store: store, app: s.App(), events: pub, log: logger, kick: make(chan struct{}, 1),
		MinBackoff: time.Second, MaxBackoff: 5 * time.Minute, Timeout: 30 * time.Second, MaxInFlight: 4}
}

// Kick asks for a delivery round now (an approval, an app's hello). It
// delivers what is due; it never cuts a proposal's backoff short.
func (in *Installer) Kick() {
	select {
	case in.kick <- struct{}{}:
	default:
	}
}

// schedule is one proposal's retry state: failures on connection conn, and
// when the next delivery is due.
type schedule struct {
	conn     uint64
	failures int
	next     time.Time
}

// delivered is a delivery's end, reported to Run.
type delivered struct {
	id, room string
	conn     uint64
	retry    bool
}

// Run delivers until ctx ends: at start, on each Kick, when a delivery
// ends, and when a proposal's backoff is over. It owns the deliveries it
// starts and waits for them before it returns.
func (in *Installer) Run(ctx context.Context) {
	limit := max(in.MaxInFlight, 1)
	sched := map[string]*schedule{} // proposal id → retry state (pending proposals only)
	busy := map[string]bool{}       // room key → a delivery in flight
	done := make(chan delivered, limit)
	var wg sync.WaitGroup
	defer wg.Wait()
	timer := time.NewTimer(time.Hour)
	timer.Stop()
	defer timer.Stop()
	in.Kick()
	for {
		select {
		case <-ctx.Done():
			return
		case <-in.kick:
		case <-timer.C:
		case d := <-done:
			delete(busy, d.room)
			if !d.retry {
				delete(sched, d.id)
				break
			}
			sc := sched[d.id]
			if sc == nil || sc.conn != d.conn {
				sc = &schedule{conn: d.conn}
				sched[d.id] = sc
			}
			sc.failures++
			sc.next = time.Now().Add(in.backoff(sc.failures))
		}
		wake, ok := in.dispatch(ctx, sched, busy, limit, done, &wg)
		timer.Stop()
		if ok {
			timer.Reset(time.Until(wake))
		}
	}
}

// backoff is the wait after n failed deliveries.
func (in *Installer) backoff(n int) time.Duration {
	d := in.MinBackoff << min(n-1, 30)
	if d > in.MaxBackoff || d <= 0 {
		d = in.MaxBackoff
	}
	return d
}

// dispatch starts the deliveries that are due, while fewer than limit are in
// flight, at most one per room, each room's in approval order. It returns
// when the earliest waiting proposal is due (false: none waits). With no app
// connected nothing is tried (the app's hello kicks the next round).
func (in *Installer) dispatch(ctx context.Context, sched map[string]*schedule, busy map[string]bool, limit int,
	done chan<- delivered, wg *sync.WaitGroup) (time.Time, bool) {
	conn, ok := in.app.s.connection()
	if !ok {
		return time.Time{}, false
	}
	jobs, err := in.store.PendingInstalls(ctx)
	if err != nil {
		if ctx.Err() == nil {
			in.log.Warn("reading the install queue failed; trying again", "err", err)
		}
		return time.Now().Add(in.MinBackoff), ctx.Err() == nil
	}
	pending := make(map[string]bool, len(jobs))
	var wake time.Time
	now := time.Now()
	for _, j := range jobs {
		pending[j.ID] = true
		room := j.Project + "\x00" + j.RoomID
		if busy[room] || len(busy) >= limit {
			continue // that room's delivery in flight comes first; or the bound is reached
		}
		if sc := sched[j.ID]; sc != nil && sc.conn == conn && now.Before(sc.next) {
			if wake.IsZero() || sc.next.Before(wake) {
				wake = sc.next
			}
			continue
		}
		busy[room] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			retry := !in.deliver(ctx, j)
			done <- delivered{id: j.ID, room: room, conn: conn, retry: retry}
		}()
	}
	for id := range sched {
		if !pending[id] {
			delete(sched, id) // installed, failed or gone: no schedule to keep
		}
	}
	return wake, !wake.IsZero()
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
		var ae *AnswerError
		if !errors.As(err, &ae) || ae.Answer.Outcome != OutcomeFailed {
			in.log.Info("install not delivered; will retry", "proposal", j.ID, "attempt", j.Attempts+1, "err", err)
			return false
		}
		state, why = rooms.InstallFailed, ae.Answer.Code+": the desktop app refused the install ("+ae.Answer.Meaning+")"
	}
	if err := in.store.FinishInstall(ctx, j.ID, state, why); err != nil {
		in.log.Warn("install outcome not recorded; it is delivered again (the app dedupes by proposal id)", "proposal", j.ID, "err", err)
		return false
	}
	in.log.Info("install", "proposal", j.ID, "instance_id", j.InstanceID, "state", state, "why", why)
	if in.events != nil {
		in.events.Publish(events.InstallChanged{ProposalID: j.ID, InstanceID: j.InstanceID, Project: j.Project,
			RoomID: j.RoomID, InstallState: state, Error: why})
	}
	if state == rooms.InstallInstalled && in.Installed != nil {
		cctx, cancel := context.WithTimeout(ctx, in.Timeout)
		in.Installed(cctx, j)
		cancel()
	}
	return true
}

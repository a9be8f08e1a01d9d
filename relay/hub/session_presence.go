package hub

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// A session's presence record: written online at connect (its revision is
// the session's epoch), rewritten when its state changes, written offline
// at the end, always with compare-and-set so a stale session never
// overwrites a newer one.
//
// It is not rewritten every heartbeat: node liveness (nodes.go) tells a
// crashed node's devices from live ones within seconds, a record names the
// node's run that wrote it (node_started), so a node restarted after a
// crash does not vouch for its predecessor's records, and a live node
// writes offline itself when a socket ends (retrying a failed write each
// heartbeat: retryOffline). A kick this node missed while cut off from
// NATS is caught by rewriting every local record after a reconnect
// (refreshLoop). The record is refreshed every presenceRefresh, so a
// record whose writer vanished without any of these (a node whose liveness
// record has expired, a node predating liveness records) still goes stale
// on its own bound. At 19,000 agents the per-heartbeat rewrite was ~760 KV
// writes a second and most of the hub's memory churn; this is ~32.

// presenceRefresh is how often a connected session's presence record is
// rewritten when nothing else changed it. Its staleness bound (below) must
// stay under the node liveness bucket's TTL (an hour), so that a crashed
// node's devices read offline even after its liveness record expired.
const presenceRefresh = 10 * time.Minute

// presenceStaleAfter is the staleness bound this node writes into its
// records: the refresh interval, plus the heartbeat tick that notices it
// is due, plus staleAfter's grace.
func (h *Hub) presenceStaleAfter() time.Duration { return presenceRefresh + h.staleAfter() }

func (s *session) goOnlineAndKick(ctx context.Context, app string) error {
	if err := s.goOnline(ctx, app); err != nil {
		return err
	}
	kick := ctlMsg{Op: opKick, Session: s.id, Epoch: s.epoch.Load()}
	if err := s.h.nc.Publish(ctlSubject(s.dev), mustJSON(kick)); err != nil {
		return fmt.Errorf("publish kick: %w", err)
	}
	return nil
}

// goOnline writes an online record unconditionally: a new session always
// supersedes older ones, and its revision becomes the session's epoch.
func (s *session) goOnline(ctx context.Context, app string) error {
	now := s.h.cfg.Now().UTC()
	rec := presenceRec{State: hubapi.StateOnline, Session: s.id, Node: s.h.cfg.NodeName,
		Since: now, LastSeen: now, Refreshed: now, NodeStarted: s.h.incarnation, StaleAfterMS: s.h.presenceStaleAfter().Milliseconds(), App: app}
	s.presMu.Lock()
	defer s.presMu.Unlock()
	rev, err := s.h.st.presence.Put(ctx, s.dev, mustJSON(rec))
	if err != nil {
		return fmt.Errorf("put presence: %w", err)
	}
	s.pres, s.presRev = rec, rev
	s.epoch.Store(rev)
	if s.h.newest.superseded(s.dev, rev) {
		return errSuperseded
	}
	return nil
}

// errSuperseded: a newer session of the device went online while this one
// was setting up.
var errSuperseded = errors.New("a newer session of this device took over")

// errPresenceLost: a newer session owns the device's presence record.
// errNeverOnline: this session never wrote one.
var (
	errPresenceLost = errors.New("a newer session owns the presence record")
	errNeverOnline  = errors.New("the session never went online")
)

// setPresence rewrites this session's presence record (writePresence); it
// returns false once a newer session owns the key.
func (s *session) setPresence(ctx context.Context, mutate func(*presenceRec)) bool {
	err := s.writePresence(ctx, mutate)
	if err != nil && !errors.Is(err, errPresenceLost) && !errors.Is(err, errNeverOnline) {
		s.log().Warn("update presence", "err", err)
	}
	return !errors.Is(err, errPresenceLost)
}

// writePresence rewrites this session's presence record with
// compare-and-set on the revision it last wrote, so a stale session never
// overwrites a newer one.
func (s *session) writePresence(ctx context.Context, mutate func(*presenceRec)) error {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	if s.presLost {
		return errPresenceLost
	}
	if s.presRev == 0 {
		return errNeverOnline
	}
	rec := s.pres
	rec.LastSeen = time.Unix(0, s.lastSeen.Load()).UTC()
	rec.Refreshed = s.h.cfg.Now().UTC()
	mutate(&rec)
	rev, err := s.h.st.presence.Update(ctx, s.dev, mustJSON(rec), s.presRev)
	if err != nil {
		if isRevMismatch(err) {
			s.presLost = true
			return errPresenceLost
		}
		return fmt.Errorf("update presence: %w", err)
	}
	s.pres, s.presRev = rec, rev
	return nil
}

// refreshPresence rewrites the record if presenceRefresh has passed since
// it was last written (heartbeats in between write nothing), or now with
// force; a newer session owning the key closes this one.
func (s *session) refreshPresence(ctx context.Context, force bool) {
	if s.closing.Load() || (!force && !s.refreshDue()) {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if !s.setPresence(ctx, func(*presenceRec) {}) {
		s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
	}
}

func (s *session) refreshDue() bool {
	s.presMu.Lock()
	defer s.presMu.Unlock()
	return s.presRev != 0 && !s.presLost && s.h.cfg.Now().Sub(s.pres.Refreshed) >= presenceRefresh
}

// writeOffline writes the session's end: offline since at, with the last
// frame's time as last_seen.
func (s *session) writeOffline(ctx context.Context, at, lastSeen time.Time) error {
	return s.writePresence(ctx, func(p *presenceRec) {
		p.State, p.Since, p.LastSeen = hubapi.StateOffline, at, lastSeen
	})
}

// offlineRetry is an ended session whose offline write failed (NATS or the
// KV unavailable): with no per-heartbeat refresh its online record would
// read online until its staleness bound, so the hub writes it again every
// heartbeat until it lands or a newer session owns the key. One per device:
// a later ended session of the device replaces it.
type offlineRetry struct {
	s            *session
	at, lastSeen time.Time
}

func (h *Hub) noteOfflineUnwritten(r offlineRetry) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.unwritten == nil {
		h.unwritten = map[string]offlineRetry{}
	}
	h.unwritten[r.s.dev] = r
}

// retryOffline writes the offline records that failed, once each; those
// that land, or that a newer session superseded, are dropped.
func (h *Hub) retryOffline(ctx context.Context) {
	h.mu.Lock()
	todo := make([]offlineRetry, 0, len(h.unwritten))
	for _, r := range h.unwritten {
		todo = append(todo, r)
	}
	h.mu.Unlock()
	for _, r := range todo {
		if ctx.Err() != nil {
			return
		}
		wctx, cancel := context.WithTimeout(ctx, opTimeout)
		err := r.s.writeOffline(wctx, r.at, r.lastSeen)
		cancel()
		if err != nil && !errors.Is(err, errPresenceLost) && !errors.Is(err, errNeverOnline) {
			continue // next heartbeat
		}
		h.mu.Lock()
		if h.unwritten[r.s.dev].s == r.s {
			delete(h.unwritten, r.s.dev)
		}
		h.mu.Unlock()
	}
}

// appPresence is what a provider state from the device says of the desktop
// app: AppOpen or AppClosed when the Rooms come from it, "" otherwise.
func appPresence(p *relay.ProviderState) string {
	switch {
	case p == nil || p.Kind != "app":
		return ""
	case p.Connected:
		return hubapi.AppOpen
	default:
		return hubapi.AppClosed
	}
}

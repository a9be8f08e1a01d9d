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
// the session's epoch), refreshed every heartbeat, written offline at the
// end, always with compare-and-set so a stale session never overwrites a
// newer one.

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
		Since: now, LastSeen: now, Refreshed: now, StaleAfterMS: s.h.staleAfter().Milliseconds(), App: app}
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

func (s *session) refreshPresence(ctx context.Context) {
	if s.closing.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, opTimeout)
	defer cancel()
	if !s.setPresence(ctx, func(*presenceRec) {}) {
		s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
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

package hub

import (
	"slices"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// A session's event budget (eventRate a minute, eventBurst at once) and
// what the hub does past it. Local churn on a device (a provider re-sending
// its directory in a loop, a thousand policy edits) must never take the
// device offline, so an excess is not answered by closing the session:
//
//   - a state-like event (latestWins: the directory, the policy, the
//     provider's presence, the audit head) carries the whole state of its
//     kind, so a newer one supersedes an older one. Past the budget the hub
//     keeps only the newest of each kind and applies it when the budget
//     allows; a later event of a kind that is waiting replaces it, so the
//     state the hub ends on is the device's last, never one lost behind
//     superseded ones. At most one event per kind waits: bounded memory.
//   - a proposal decision or a sleeping announcement is not superseded by
//     anything: past the budget the reader waits for the budget (the
//     socket's flow control slows the agent), one event at a time.
//   - any other kind does nothing at the hub; past the budget it is dropped.

// latestWins are the event kinds whose newest event replaces every earlier
// one of the same kind.
var latestWins = map[string]bool{
	relay.EventRoomsChanged:    true,
	relay.EventPolicyChanged:   true,
	relay.EventProviderChanged: true,
	relay.EventAuditHead:       true,
}

// waitedFor are the kinds the reader waits for the budget to apply.
var waitedFor = map[string]bool{relay.EventProposalDecided: true, relay.EventSleeping: true}

func (s *session) handleEvent(ev *relay.Event) {
	limit := MaxEventData
	if ev.Event == relay.EventRoomsChanged {
		limit = maxDirectoryData
	}
	if len(ev.Data) > limit {
		s.log().Warn("event too large; dropped", "event", relay.Clip(ev.Event, 64), "bytes", len(ev.Data), "max", limit)
		s.h.metrics.event(ev.Event, evDropped)
		return
	}
	if latestWins[ev.Event] {
		s.evApply.Lock()
		defer s.evApply.Unlock()
		if s.deferEvent(ev) {
			return
		}
		s.h.metrics.event(ev.Event, evApplied)
		s.applyEvent(ev)
		return
	}
	if !s.takeEvent() {
		if !waitedFor[ev.Event] {
			s.log().Debug("event rate exceeded; dropped an event the hub does not use", "event", relay.Clip(ev.Event, 64))
			s.h.metrics.event(ev.Event, evDropped)
			return
		}
		if !s.waitEvent() {
			return // the session is ending
		}
		s.h.metrics.event(ev.Event, evSlowed)
	} else {
		s.h.metrics.event(ev.Event, evApplied)
	}
	s.evApply.Lock()
	defer s.evApply.Unlock()
	s.applyEvent(ev)
}

// takeEvent takes one event from the budget.
func (s *session) takeEvent() bool {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	return s.takeLocked()
}

func (s *session) takeLocked() bool {
	now := s.h.cfg.Now()
	if s.evLast.IsZero() {
		s.evTokens, s.evLast = eventBurst, now
	}
	if d := now.Sub(s.evLast); d > 0 {
		s.evTokens = min(eventBurst, s.evTokens+d.Minutes()*eventRate)
		s.evLast = now
	}
	if s.evTokens < 1 {
		return false
	}
	s.evTokens--
	return true
}

// tokenWaitLocked is how long until the budget holds one event again.
func (s *session) tokenWaitLocked() time.Duration {
	missing := 1 - s.evTokens
	return max(time.Duration(missing/eventRate*float64(time.Minute)), time.Millisecond)
}

// waitEvent blocks the reader until the budget holds an event and takes it;
// false if the session ends first.
func (s *session) waitEvent() bool {
	for {
		s.evMu.Lock()
		if s.takeLocked() {
			s.evMu.Unlock()
			return true
		}
		wait := s.tokenWaitLocked()
		s.evMu.Unlock()
		if s.closing.Load() {
			return false
		}
		s.log().Debug("event rate exceeded; reading the next event later", "wait", wait)
		time.Sleep(wait)
	}
}

// deferEvent keeps ev, a latestWins event, to apply later when an event of
// its kind is already waiting (ev replaces it) or the budget is spent; it
// reports whether it did. The caller holds s.evApply.
func (s *session) deferEvent(ev *relay.Event) bool {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	for i := range s.evWaiting {
		if s.evWaiting[i].Event == ev.Event {
			s.evWaiting[i] = *ev
			s.h.metrics.event(ev.Event, evReplaced)
			return true
		}
	}
	if s.takeLocked() {
		return false
	}
	if s.evStopped {
		return true // the session ends; the next hello carries the state
	}
	s.evWaiting = append(s.evWaiting, *ev)
	s.h.metrics.event(ev.Event, evWaited)
	if s.evTimer == nil {
		s.log().Info("event rate exceeded; keeping the newest event of each kind for later", "event", ev.Event)
		s.evTimer = time.AfterFunc(s.tokenWaitLocked(), s.applyWaiting)
	}
	return true
}

// retryEvent keeps ev, a latestWins event the hub could not apply yet (a
// directory past the churn bound), to apply after wait, unless a newer
// event of its kind replaces it first. The caller holds s.evApply.
func (s *session) retryEvent(ev *relay.Event, wait time.Duration) {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	if s.evStopped || slices.ContainsFunc(s.evWaiting, func(w relay.Event) bool { return w.Event == ev.Event }) {
		return
	}
	s.evWaiting = append(s.evWaiting, *ev)
	if s.evTimer == nil { // a timer already armed tries it sooner
		s.evTimer = time.AfterFunc(max(wait, s.tokenWaitLocked()), s.applyWaiting)
	}
}

// applyWaiting applies the waiting events the budget allows now, and
// schedules itself again for the rest.
func (s *session) applyWaiting() {
	s.evApply.Lock()
	defer s.evApply.Unlock()
	s.evMu.Lock()
	s.evTimer = nil
	var due []relay.Event
	for len(s.evWaiting) > 0 && !s.evStopped && s.takeLocked() {
		due = append(due, s.evWaiting[0])
		s.evWaiting = s.evWaiting[1:]
	}
	if len(s.evWaiting) == 0 {
		s.evWaiting = nil
	} else if !s.evStopped {
		s.evTimer = time.AfterFunc(s.tokenWaitLocked(), s.applyWaiting)
	}
	s.evMu.Unlock()
	for i := range due {
		s.applyEvent(&due[i])
	}
}

// stopEvents ends the session's event handling: waiting events are
// dropped (the agent's next hello carries its whole state) and an
// application under way finishes before it returns.
func (s *session) stopEvents() {
	s.evApply.Lock()
	defer s.evApply.Unlock()
	s.evMu.Lock()
	defer s.evMu.Unlock()
	s.evStopped = true
	if s.evTimer != nil {
		s.evTimer.Stop()
		s.evTimer = nil
	}
	s.evWaiting = nil
}

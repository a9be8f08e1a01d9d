package hub

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"golang.org/x/time/rate"

	"github.com/roomrelay/roomrelay/relay"
)

// A session's event budgets (eventRate a minute, eventBurst at once; state
// events have a budget of their own, so no other kind can hold a state
// change back) and what the hub does past them. Local churn on a device (a
// provider re-sending its directory in a loop, a thousand policy edits)
// must never take the device offline, so an excess is not answered by
// closing the session:
//
//   - a state-like event (latestWins: the directory, the policy, the
//     provider's presence, the audit head) carries the whole state of its
//     kind, so a newer one supersedes an older one. Past the budget the hub
//     keeps only the newest of each kind and applies it when the budget
//     allows; a later event of a kind that is waiting replaces it, so the
//     state the hub ends on is the device's last, never one lost behind
//     superseded ones. At most one event per kind waits: bounded memory.
//   - a proposal decision is the owner's, for a proposal a cloud caller
//     made through the hub: the first decision on a proposal the hub
//     routed is applied whatever the budget (what it costs is bounded by
//     the proposals callers made, and an owner declining a thousand at once
//     must not stall the device's commands behind them). Any other
//     decision, and a sleeping announcement, is not superseded by anything:
//     past the budget the reader waits for the budget (the socket's flow
//     control slows the agent), one event at a time.
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
	if !s.takeEvent() && !s.freshDecision(ev) {
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

// evBucket is one bucket of a session's event budget: eventRate a minute,
// eventBurst at once, on x/time/rate like every other bucket, made at the
// first event (a session that sends none holds none). Guarded by the
// session's evMu, which also orders take and wait.
type evBucket struct{ l *rate.Limiter }

// take takes one event from b at now.
func (b *evBucket) take(now time.Time) bool {
	if b.l == nil {
		b.l = rate.NewLimiter(rate.Limit(eventRate/60.0), eventBurst)
	}
	return b.l.AllowN(now, 1)
}

// wait is how long after now until b holds one event again.
func (b *evBucket) wait(now time.Time) time.Duration {
	if b.l == nil {
		return time.Millisecond
	}
	missing := 1 - b.l.TokensAt(now)
	return max(time.Duration(missing/eventRate*float64(time.Minute)), time.Millisecond)
}

// takeEvent takes one event from the budget of events that are not
// latestWins.
func (s *session) takeEvent() bool {
	s.evMu.Lock()
	defer s.evMu.Unlock()
	return s.evBudget.take(s.h.cfg.Now())
}

// takeStateLocked takes one latestWins event from the state budget.
func (s *session) takeStateLocked() bool { return s.stBudget.take(s.h.cfg.Now()) }

// waitEvent blocks the reader until the budget holds an event and takes it;
// false if the session ends first.
func (s *session) waitEvent() bool {
	for {
		s.evMu.Lock()
		if s.evBudget.take(s.h.cfg.Now()) {
			s.evMu.Unlock()
			return true
		}
		wait := s.evBudget.wait(s.h.cfg.Now())
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
	if s.takeStateLocked() {
		return false
	}
	if s.evStopped {
		return true // the session ends; the next hello carries the state
	}
	s.evWaiting = append(s.evWaiting, *ev)
	s.h.metrics.event(ev.Event, evWaited)
	if s.evTimer == nil {
		s.log().Info("event rate exceeded; keeping the newest event of each kind for later", "event", ev.Event)
		s.evTimer = time.AfterFunc(s.stBudget.wait(s.h.cfg.Now()), s.applyWaiting)
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
		s.evTimer = time.AfterFunc(max(wait, s.stBudget.wait(s.h.cfg.Now())), s.applyWaiting)
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
	for len(s.evWaiting) > 0 && !s.evStopped && s.takeStateLocked() {
		due = append(due, s.evWaiting[0])
		s.evWaiting = s.evWaiting[1:]
	}
	if len(s.evWaiting) == 0 {
		s.evWaiting = nil
	} else if !s.evStopped {
		s.evTimer = time.AfterFunc(s.stBudget.wait(s.h.cfg.Now()), s.applyWaiting)
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

// freshDecision reports whether ev is the first decision the hub sees on a
// proposal it routed: such a decision is applied past the budget.
func (s *session) freshDecision(ev *relay.Event) bool {
	if ev.Event != relay.EventProposalDecided {
		return false
	}
	var d struct {
		ProposalID string `json:"proposal_id"`
	}
	if json.Unmarshal(ev.Data, &d) != nil || !kvKeyRe.MatchString(d.ProposalID) {
		return false
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	if routed, err := s.h.routedProposal(ctx, s.dev, d.ProposalID); err != nil || !routed {
		return false
	}
	_, err := s.h.st.proposals.Get(ctx, proposalKey(s.dev, d.ProposalID))
	return errors.Is(err, jetstream.ErrKeyNotFound)
}

package oauth

import (
	"context"
	"sync"
	"time"
)

// Pending authorization requests (#29.2). A consent page is stored before
// anyone acts on it, because a device's owner approves it from another
// machine by its short code (`roomrelay oauth approve CODE`), which the
// hub must find. Carrying the request signed in the page instead would
// leave that code nothing to find, so the stored requests are bounded
// here, per node: at most pendingPerPrefix unacted ones per client prefix
// (a newer one evicts that prefix's oldest) and pendingCap in all (a
// newcomer evicts the oldest of the aggregate, IPv4 /24 or IPv6 /48,
// holding the most). Each lives RequestTTL (5 min), not the bucket's 30.
// A request leaves the index when a person decides it.

const (
	pendingPerPrefix = 8
	pendingCap       = 1024 // ~2.5 KB each with its code: ~2.5 MB per node
)

type pendingRef struct {
	id, codeHash   string
	prefix, aggr   string
	created, until time.Time
}

// pendingIndex is the node's list of unacted requests, oldest first.
type pendingIndex struct {
	capTotal int

	mu   sync.Mutex
	list []pendingRef
}

// add records ref and returns the requests it evicts.
func (x *pendingIndex) add(ref pendingRef, now time.Time) (evicted []pendingRef) {
	x.mu.Lock()
	defer x.mu.Unlock()
	live := x.list[:0]
	for _, r := range x.list {
		if now.Before(r.until) {
			live = append(live, r)
		}
	}
	clear(x.list[len(live):])
	x.list = live
	perPrefix, perAggr := 0, map[string]int{}
	for _, r := range x.list {
		if r.prefix == ref.prefix {
			perPrefix++
		}
		perAggr[r.aggr]++
	}
	switch {
	case perPrefix >= pendingPerPrefix:
		evicted = append(evicted, x.removeFirstLocked(func(r pendingRef) bool { return r.prefix == ref.prefix }))
	case len(x.list) >= x.capTotal:
		heaviest, most := "", 0
		for _, r := range x.list { // oldest first: ties go to the aggregate of the oldest
			if perAggr[r.aggr] > most {
				heaviest, most = r.aggr, perAggr[r.aggr]
			}
		}
		evicted = append(evicted, x.removeFirstLocked(func(r pendingRef) bool { return r.aggr == heaviest }))
	}
	x.list = append(x.list, ref)
	return evicted
}

func (x *pendingIndex) removeFirstLocked(match func(pendingRef) bool) pendingRef {
	for i, r := range x.list {
		if match(r) {
			x.list = append(x.list[:i], x.list[i+1:]...)
			return r
		}
	}
	return pendingRef{}
}

// acted removes a request a person decided.
func (x *pendingIndex) acted(id string) {
	x.mu.Lock()
	defer x.mu.Unlock()
	for i, r := range x.list {
		if r.id == id {
			x.list = append(x.list[:i], x.list[i+1:]...)
			return
		}
	}
}

// storePending stores a consent page's request and its user code, each
// for RequestTTL, and evicts what the index says.
func (s *Server) storePending(ctx context.Context, p *pendingRec, userCode string) error {
	ref := pendingRef{id: p.ID, codeHash: p.UserCodeHash, prefix: clientPrefixOf(p.Addr), aggr: clientAggregateOf(p.Addr),
		created: p.CreatedAt, until: p.ExpiresAt}
	for _, v := range s.pending.add(ref, s.cfg.Now()) {
		if v.id == "" {
			continue
		}
		_ = del(ctx, s.st, requestKey(v.id), 0)
		_ = del(ctx, s.st, userCodeKeyOf(v.codeHash), 0)
		s.m.authorizations.WithLabelValues("evicted_unacted").Inc()
	}
	if err := createRec(ctx, s.st, requestKey(p.ID), p, s.cfg.RequestTTL); err != nil {
		return err
	}
	uk := userCodeKey(userCode)
	_, err := s.st.Create(ctx, uk.t, uk.k, []byte(p.ID), s.cfg.RequestTTL) // the request id, raw
	return err
}

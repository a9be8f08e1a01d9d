package oauth

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"time"
)

// Registrations (#29.3). Anyone may register a client, so a registration
// that never completed a sign-in is kept only unusedClientTTL; its first
// completed sign-in (a code exchanged) rewrites it without that TTL, and
// then it lives until unused for the bucket's 90 days. A full table
// evicts never-used registrations, oldest first, before it refuses one:
// a registration that has signed in is never evicted by strangers.

// unusedClientTTL is how long a registration that never signed in lives.
const unusedClientTTL = 3 * time.Hour

// evictBatch is the least a full table evicts at once, so a flood does
// not rescan the table for every registration.
const evictBatch = 32

// clientEvictor serializes evictions: concurrent registrations that find
// the table full wait for one scan instead of each making their own.
type clientEvictor struct {
	mu sync.Mutex
}

// createClient stores a new registration with the never-used TTL; a full
// table evicts never-used registrations first, then retries once.
func (s *Server) createClient(ctx context.Context, c *clientRec) error {
	err := createRec(ctx, s.st, clientKey(c.ID), c, unusedClientTTL)
	if !isFull(err) {
		return err
	}
	s.evictor.mu.Lock()
	defer s.evictor.mu.Unlock()
	// Another registration may have evicted meanwhile.
	if err = createRec(ctx, s.st, clientKey(c.ID), c, unusedClientTTL); !isFull(err) {
		return err
	}
	n, eerr := s.evictUnusedClients(ctx)
	if eerr != nil {
		return eerr
	}
	s.logs.Log(slog.LevelWarn, "oauth clients table full: evicted never-used registrations", "evicted", n)
	if n == 0 {
		return err
	}
	return createRec(ctx, s.st, clientKey(c.ID), c, unusedClientTTL)
}

// evictUnusedClients deletes the oldest never-used registrations: at
// least evictBatch, or a sixteenth of them.
func (s *Server) evictUnusedClients(ctx context.Context) (int, error) {
	cs, err := listRecs[clientRec](ctx, s.st, TableClients, clientPrefix)
	if err != nil {
		return 0, err
	}
	cs = slices.DeleteFunc(cs, func(c *clientRec) bool { return !c.LastUsed.IsZero() })
	slices.SortFunc(cs, func(a, b *clientRec) int { return a.CreatedAt.Compare(b.CreatedAt) })
	n := min(len(cs), max(evictBatch, len(cs)/16))
	for _, c := range cs[:n] {
		if err := del(ctx, s.st, clientKey(c.ID), 0); err != nil {
			return 0, unavailable("evict a registration", err)
		}
	}
	s.m.clientsEvicted.Add(float64(n))
	return n, nil
}

// clientSignedIn records a registration's completed sign-in (at most
// daily): the write drops its never-used TTL and restarts its age.
func (s *Server) clientSignedIn(ctx context.Context, id string) {
	now := s.cfg.Now().UTC()
	_, _ = update(context.WithoutCancel(ctx), s.st, clientKey(id), func(c *clientRec) error {
		if now.Sub(c.LastUsed) < 24*time.Hour {
			return errSkip
		}
		c.LastUsed = now
		return nil
	})
}

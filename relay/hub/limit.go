package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// failLimiter bounds failed attempts per client address in a fixed window:
// it makes guessing pairing codes (8 characters of a 32-letter alphabet,
// about 10^12) hopeless from one address, without slowing down anyone who
// types a valid code. The key is Hub.ClientAddr, not the TCP peer: behind
// a reverse proxy every client would share the proxy's address.
type failLimiter struct {
	max    int
	window time.Duration
	now    func() time.Time

	mu   sync.Mutex
	hits map[string]*failWindow
}

type failWindow struct {
	start time.Time
	n     int
}

// maxTracked bounds the limiter's memory; past it, expired windows are
// dropped first.
const maxTracked = 10_000

func newFailLimiter(max int, window time.Duration, now func() time.Time) *failLimiter {
	return &failLimiter{max: max, window: window, now: now, hits: map[string]*failWindow{}}
}

// blocked reports whether key used up its failures, and when it may retry.
func (l *failLimiter) blocked(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	w := l.hits[key]
	if w == nil {
		return false, 0
	}
	left := w.start.Add(l.window).Sub(l.now())
	if left <= 0 {
		delete(l.hits, key)
		return false, 0
	}
	return w.n >= l.max, left
}

// take reserves one attempt of key before it is evaluated: false (and
// when to retry) when key used up its attempts. Concurrent attempts cannot
// all pass the check before any is counted. refund gives back the attempt
// of one that succeeded.
func (l *failLimiter) take(key string) (bool, time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if w := l.hits[key]; w != nil {
		if left := w.start.Add(l.window).Sub(now); left > 0 && w.n >= l.max {
			return false, left
		}
	}
	l.failLocked(key, now)
	return true, 0
}

// refund returns an attempt taken for key (it succeeded).
func (l *failLimiter) refund(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if w := l.hits[key]; w != nil && w.n > 0 {
		w.n--
	}
}

// fail counts one failed attempt of key.
func (l *failLimiter) fail(key string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.failLocked(key, l.now())
}

func (l *failLimiter) failLocked(key string, now time.Time) {
	w := l.hits[key]
	if w == nil || !now.Before(w.start.Add(l.window)) {
		if len(l.hits) >= maxTracked {
			l.pruneLocked(now)
		}
		w = &failWindow{start: now}
		l.hits[key] = w
	}
	w.n++
}

func (l *failLimiter) pruneLocked(now time.Time) {
	for k, w := range l.hits {
		if !now.Before(w.start.Add(l.window)) {
			delete(l.hits, k)
		}
	}
	// Still full: every entry is a live window of some address. Forget the
	// lot rather than grow without bound; the limit resets for all.
	if len(l.hits) >= maxTracked {
		clear(l.hits)
	}
}

// ClientAddr is the address of the client behind a request, the key of the
// enrollment limit and what logs show: the TCP peer's IP, or, when the peer
// is one of Config.TrustedProxies, the X-Forwarded-For entry nearest to it
// that is not a trusted proxy. Entries are walked from the right because
// only the part a trusted proxy appended can be believed; whatever a client
// sent itself lies further left. A malformed entry ends the walk at the
// peer: a proxy that forwards garbage is not followed past it.
func (h *Hub) ClientAddr(r *http.Request) string {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	if err != nil {
		host, _, err := net.SplitHostPort(r.RemoteAddr)
		if err != nil {
			return r.RemoteAddr
		}
		return host
	}
	ip := peer.Addr().Unmap()
	if !h.trusted(ip) {
		return ip.String()
	}
	var hops []string
	for _, v := range r.Header.Values("X-Forwarded-For") {
		hops = append(hops, strings.Split(v, ",")...)
	}
	client := ip
	for i := len(hops) - 1; i >= 0; i-- {
		a, err := parseHop(hops[i])
		if err != nil {
			return ip.String()
		}
		client = a
		if !h.trusted(a) {
			break
		}
	}
	// Every hop trusted: the leftmost is the furthest known.
	return client.String()
}

// FromTrustedProxy reports whether the request's TCP peer is one of
// Config.TrustedProxies, whose forwarded headers may be believed.
func (h *Hub) FromTrustedProxy(r *http.Request) bool {
	peer, err := netip.ParseAddrPort(r.RemoteAddr)
	return err == nil && h.trusted(peer.Addr().Unmap())
}

func (h *Hub) trusted(a netip.Addr) bool { return inPrefixes(h.cfg.TrustedProxies, a) }

// inPrefixes reports whether a is in one of ps.
func inPrefixes(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseHop reads one X-Forwarded-For entry: an IP, maybe with a port
// ("192.0.2.1:4711", "[2001:db8::1]:4711").
func parseHop(s string) (netip.Addr, error) {
	s = strings.TrimSpace(s)
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap(), nil
	}
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		return netip.Addr{}, fmt.Errorf("X-Forwarded-For entry %q: %w", s, err)
	}
	return ap.Addr().Unmap(), nil
}

// Failed enrollments are also recorded in rr_enroll, one fixed window per
// address (its start travels in the record and is judged by the hub's
// clock), so a hub restart forgets nothing and every node counts every
// node's failures. The in-memory failLimiter stays the reservation that
// concurrent attempts on one node cannot pass all at once; this is the
// shared count behind it. A storage failure is logged and leaves the
// in-memory limit in force.
type enrollFailRec struct {
	Start time.Time `json:"start"`
	N     int       `json:"n"`
}

func enrollKey(addr string) string { return hashSecret("enroll-addr", addr)[:40] }

// storedEnrollBlock reports whether addr used up its failures in the
// current window, and when it may retry.
func (h *Hub) storedEnrollBlock(ctx context.Context, addr string) (bool, time.Duration) {
	rec, _, err := getJSON[enrollFailRec](ctx, h.st.enroll, enrollKey(addr))
	if err != nil {
		if !errors.Is(err, jetstream.ErrKeyNotFound) {
			h.log.Warn("read enrollment failures", "err", err)
		}
		return false, 0
	}
	left := rec.Start.Add(h.cfg.EnrollWindow).Sub(h.cfg.Now())
	return left > 0 && rec.N >= h.cfg.EnrollFailures, left
}

// recordEnrollFailure counts one failed enrollment of addr in rr_enroll.
func (h *Hub) recordEnrollFailure(ctx context.Context, addr string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), opTimeout)
	defer cancel()
	key, now := enrollKey(addr), h.cfg.Now().UTC()
	for range 8 {
		rec, rev, err := getJSON[enrollFailRec](ctx, h.st.enroll, key)
		switch {
		case errors.Is(err, jetstream.ErrKeyNotFound):
			rec, rev = &enrollFailRec{Start: now}, 0
		case err != nil:
			h.log.Warn("read enrollment failures", "err", err)
			return
		}
		if !now.Before(rec.Start.Add(h.cfg.EnrollWindow)) {
			rec = &enrollFailRec{Start: now}
		}
		rec.N++
		if rev == 0 {
			_, err = h.st.enroll.Create(ctx, key, mustJSON(rec))
		} else {
			_, err = h.st.enroll.Update(ctx, key, mustJSON(rec), rev)
		}
		if err == nil {
			return
		}
		if !isRevMismatch(err) {
			h.log.Warn("record an enrollment failure", "err", err)
			return
		}
	}
}

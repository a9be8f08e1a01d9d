package hub

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// ConnLimiter caps the hub's plain HTTP connections, per client prefix and
// in total, through http.Server.ConnState. A client prefix is one IPv4
// address or one IPv6 /64 (a single host has a whole /64). A connection
// over its prefix's cap is closed as soon as it is accepted, before a byte
// is read. At the total cap a new connection from a prefix holding fewer
// connections than the heaviest one takes a place from that heaviest
// prefix: its oldest idle connection, else its oldest connection still
// reading a request (a slow client), is closed. A connection whose request
// is being served (its handler runs: a long poll, a command waiting for the
// device) is never taken: with Install the limiter knows which those are,
// and when the heaviest prefix holds nothing else the next heaviest gives
// the place. So a handful of prefixes holding their maximum cannot shut
// everyone else out, an agent's upgrade request from a light prefix always
// gets in, and nobody's request in flight is cut. A connection that became
// an agent websocket (hijacked) stops counting, so the agents already
// connected keep being served when the caps are hit.
type ConnLimiter struct {
	perAddr, total int
	exempt         []netip.Prefix // trusted proxies: many clients behind one address

	mu      sync.Mutex
	n       int
	seq     uint64
	byKey   map[string]map[net.Conn]*connInfo
	conns   map[net.Conn]*connInfo
	shed    uint64
	evicted uint64
}

// connInfo is one counted connection.
type connInfo struct {
	key     string
	seq     uint64 // accept order: lower is older
	state   http.ConnState
	serving int // requests whose handler runs on it now (Install)
	exempt  bool
}

// connKey is the context key under which Install's ConnContext keeps the
// request's connection.
type connKey struct{}

// Install makes srv count its connections here: ConnState, and a
// ConnContext and a handler wrapper that mark a connection as serving
// while its request's handler runs, so eviction never takes it. Call it
// once srv's Handler is set, before serving.
func (l *ConnLimiter) Install(srv *http.Server) {
	srv.ConnState = l.ConnState
	prevCtx := srv.ConnContext
	srv.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if prevCtx != nil {
			ctx = prevCtx(ctx, c)
		}
		return context.WithValue(ctx, connKey{}, c)
	}
	next := srv.Handler
	if next == nil {
		next = http.DefaultServeMux
	}
	srv.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, _ := r.Context().Value(connKey{}).(net.Conn)
		l.markServing(c, 1)
		defer l.markServing(c, -1)
		next.ServeHTTP(w, r)
	})
}

// markServing counts a handler starting (+1) or ending (-1) on c.
func (l *ConnLimiter) markServing(c net.Conn, d int) {
	if c == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if ci, ok := l.conns[c]; ok { // a hijacked connection is no longer counted
		ci.serving = max(ci.serving+d, 0)
	}
}

// NewConnLimiter allows perAddr connections from one client prefix and
// total in all (0: no cap of that kind).
func NewConnLimiter(perAddr, total int) *ConnLimiter {
	return &ConnLimiter{perAddr: perAddr, total: total, byKey: map[string]map[net.Conn]*connInfo{}, conns: map[net.Conn]*connInfo{}}
}

// ExemptFromPerAddr lifts the per-prefix cap for peers in prefixes (the
// trusted proxies, whose one address carries every client behind them);
// the total cap still counts them, and their connections are never taken
// for another client's. Call it before serving.
func (l *ConnLimiter) ExemptFromPerAddr(prefixes []netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exempt = prefixes
}

// clientKey is the prefix a peer address is capped by: the IPv4 address,
// or the IPv6 /64.
func clientKey(host string) (key string, ip netip.Addr) {
	a, err := netip.ParseAddr(host)
	if err != nil {
		return host, netip.Addr{}
	}
	a = a.Unmap().WithZone("")
	if a.Is6() {
		p, _ := a.Prefix(64)
		return p.String(), a
	}
	return a.String(), a
}

// ConnState is the http.Server hook.
func (l *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		key, ip := clientKey(hostOf(c.RemoteAddr()))
		var victim net.Conn
		l.mu.Lock()
		exempt := ip.IsValid() && inPrefixes(l.exempt, ip)
		held := len(l.byKey[key])
		over := l.perAddr > 0 && held >= l.perAddr && !exempt
		if !over && l.total > 0 && l.n >= l.total {
			victim = l.victimLocked(held)
			over = victim == nil
		}
		if over {
			l.shed++
		} else {
			if victim != nil {
				l.forgetLocked(victim)
				l.evicted++
			}
			l.seq++
			ci := &connInfo{key: key, seq: l.seq, state: http.StateNew, exempt: exempt}
			l.n++
			if l.byKey[key] == nil {
				l.byKey[key] = map[net.Conn]*connInfo{}
			}
			l.byKey[key][c] = ci
			l.conns[c] = ci
		}
		l.mu.Unlock()
		if victim != nil {
			victim.Close()
		}
		if over {
			c.Close()
		}
	case http.StateActive, http.StateIdle:
		l.mu.Lock()
		if ci, ok := l.conns[c]; ok {
			ci.state = s
		}
		l.mu.Unlock()
	case http.StateHijacked, http.StateClosed:
		l.mu.Lock()
		l.forgetLocked(c)
		l.mu.Unlock()
	}
}

// victimTries bounds how many prefixes victimLocked looks into, heaviest
// first, for a connection that is not being served.
const victimTries = 4

// victimLocked picks the connection a newcomer whose prefix holds held
// connections takes the place of: in the heaviest non-exempt prefix that
// holds more than held+1, the oldest idle connection, else the oldest one
// that has not finished reading a request yet; never one whose request is
// being served (a prefix with none of the others gives way to the next
// heaviest). nil: the newcomer is shed.
func (l *ConnLimiter) victimLocked(held int) net.Conn {
	tried := map[string]bool{}
	for range victimTries {
		heavyKey, heavy := "", map[net.Conn]*connInfo(nil)
		for k, m := range l.byKey {
			if len(m) <= len(heavy) || tried[k] {
				continue
			}
			for _, ci := range m {
				if !ci.exempt {
					heavyKey, heavy = k, m
				}
				break
			}
		}
		if len(heavy) <= held+1 {
			return nil
		}
		tried[heavyKey] = true
		if c := oldestUnserved(heavy); c != nil {
			return c
		}
	}
	return nil
}

// oldestUnserved is m's oldest idle connection, else its oldest one not
// yet (or no longer) serving a request; nil if every one is serving.
func oldestUnserved(m map[net.Conn]*connInfo) net.Conn {
	var best net.Conn
	var bestInfo *connInfo
	rank := func(ci *connInfo) int { // lower goes first
		switch ci.state {
		case http.StateIdle:
			return 0
		case http.StateNew:
			return 1
		}
		return 2
	}
	for c, ci := range m {
		if ci.serving > 0 {
			continue
		}
		if best == nil || rank(ci) < rank(bestInfo) || (rank(ci) == rank(bestInfo) && ci.seq < bestInfo.seq) {
			best, bestInfo = c, ci
		}
	}
	return best
}

// forgetLocked stops counting c.
func (l *ConnLimiter) forgetLocked(c net.Conn) {
	ci, ok := l.conns[c]
	if !ok {
		return
	}
	delete(l.conns, c)
	l.n--
	m := l.byKey[ci.key]
	delete(m, c)
	if len(m) == 0 {
		delete(l.byKey, ci.key)
	}
}

// Stats returns the connections counted now and how many were shed (closed
// at accept, or closed to make room for a lighter client).
func (l *ConnLimiter) Stats() (open int, shed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.shed + l.evicted
}

func hostOf(a net.Addr) string {
	if a == nil {
		return ""
	}
	host, _, err := net.SplitHostPort(a.String())
	if err != nil {
		return a.String()
	}
	return host
}

// extendWrite moves a long handler's write deadline past the server's
// WriteTimeout (a command may take minutes, a long poll a minute).
func extendWrite(w http.ResponseWriter, d time.Duration) {
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(d))
}

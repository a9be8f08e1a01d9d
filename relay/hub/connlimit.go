package hub

import (
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
// reading a request (a slow client), is closed. So a handful of prefixes
// holding their maximum cannot shut everyone else out, and an agent's
// upgrade request from a light prefix always gets in. A connection that
// became an agent websocket (hijacked) stops counting, so the agents
// already connected keep being served when the caps are hit.
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
	key    string
	seq    uint64 // accept order: lower is older
	state  http.ConnState
	exempt bool
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

// victimLocked picks the connection a newcomer whose prefix holds held
// connections takes the place of: in the heaviest non-exempt prefix, if it
// holds more than held+1, the oldest idle connection, else the oldest one
// that has not finished a request yet. nil: the newcomer is shed.
func (l *ConnLimiter) victimLocked(held int) net.Conn {
	var heavy map[net.Conn]*connInfo
	for _, m := range l.byKey {
		if len(m) > len(heavy) {
			for _, ci := range m {
				if !ci.exempt {
					heavy = m
				}
				break
			}
		}
	}
	if len(heavy) <= held+1 {
		return nil
	}
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
	for c, ci := range heavy {
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

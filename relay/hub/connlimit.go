package hub

import (
	"net"
	"net/http"
	"net/netip"
	"sync"
	"time"
)

// ConnLimiter caps the hub's plain HTTP connections, per client address and
// in total, through http.Server.ConnState: a connection over a cap is closed
// as soon as it is accepted, before a byte is read. A connection that became
// an agent websocket (hijacked) stops counting, so a flood of idle or
// dribbling connections cannot exhaust the hub's file descriptors, and the
// agents already connected keep being served when the cap is hit.
type ConnLimiter struct {
	perAddr, total int
	exempt         []netip.Prefix // trusted proxies: many clients behind one address

	mu     sync.Mutex
	n      int
	byAddr map[string]int
	conns  map[net.Conn]string // counted connections → their address
	shed   uint64
}

// NewConnLimiter allows perAddr connections from one address and total in
// all (0: no cap of that kind).
func NewConnLimiter(perAddr, total int) *ConnLimiter {
	return &ConnLimiter{perAddr: perAddr, total: total, byAddr: map[string]int{}, conns: map[net.Conn]string{}}
}

// ExemptFromPerAddr lifts the per-address cap for peers in prefixes (the
// trusted proxies, whose one address carries every client behind them);
// the total cap still counts them. Call it before serving.
func (l *ConnLimiter) ExemptFromPerAddr(prefixes []netip.Prefix) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.exempt = prefixes
}

func (l *ConnLimiter) exemptLocked(addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && inPrefixes(l.exempt, a.Unmap())
}

// ConnState is the http.Server hook.
func (l *ConnLimiter) ConnState(c net.Conn, s http.ConnState) {
	switch s {
	case http.StateNew:
		addr := hostOf(c.RemoteAddr())
		l.mu.Lock()
		over := (l.total > 0 && l.n >= l.total) ||
			(l.perAddr > 0 && l.byAddr[addr] >= l.perAddr && !l.exemptLocked(addr))
		if over {
			l.shed++
		} else {
			l.n++
			l.byAddr[addr]++
			l.conns[c] = addr
		}
		l.mu.Unlock()
		if over {
			c.Close()
		}
	case http.StateHijacked, http.StateClosed:
		l.mu.Lock()
		if addr, ok := l.conns[c]; ok {
			delete(l.conns, c)
			l.n--
			if l.byAddr[addr]--; l.byAddr[addr] <= 0 {
				delete(l.byAddr, addr)
			}
		}
		l.mu.Unlock()
	}
}

// Stats returns the connections counted now and how many were shed.
func (l *ConnLimiter) Stats() (open int, shed uint64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n, l.shed
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

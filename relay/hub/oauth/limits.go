package oauth

import (
	"context"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/internal/keyrate"
	"github.com/roomrelay/roomrelay/relay/hub"
)

// Flow control for what strangers can call without signing in (#29):
// every endpoint that writes, or logs, on an unauthenticated request is
// bounded per client prefix (hub.ClientPrefix: an IPv4 address or an
// IPv6 /64, as the hub's connection caps count) and, where a prefix is
// cheap to change, per wider aggregate (an IPv4 /24, an IPv6 /48). The
// limiters are per node and in memory: a cluster of n nodes allows n
// times as much, which the stores' bounds account for (docs/oauth.md).

// The limits. Each is far above what a person's MCP client does (it
// registers once, refreshes about hourly, revokes at sign-out).
const (
	revokePerPrefix   = 30  // revocations per prefix and minute
	tokenPerPrefix    = 120 // token requests per prefix and minute
	tokenPerGrant     = 10  // refreshes per grant and minute
	registerPerAggr   = 5   // registrations per aggregate: this many times the per-prefix rate
	authorizePerPrefx = 30  // consent pages per prefix and minute
)

func clientPrefixOf(addr string) string    { return hub.ClientPrefix(addr) }
func clientAggregateOf(addr string) string { return hub.ClientAggregate(addr) }

// rateLimited answers 429 with the rule that refused and when to retry.
func (s *Server) rateLimited(w http.ResponseWriter, wait time.Duration, rule string) {
	w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
	writeJSON(w, http.StatusTooManyRequests, map[string]string{"error": string(codeRateLimited), "error_description": rule})
}

// rateLimiter is n events per window per key: roomrelay's one token
// bucket (internal/keyrate, burst n), in bounded memory.
type rateLimiter struct {
	b *keyrate.Buckets
	r keyrate.Rate
}

func newRateLimiter(n int, window time.Duration, now func() time.Time) *rateLimiter {
	return &rateLimiter{b: keyrate.New(10_000, now), r: keyrate.Per(n, window, n)}
}

// take spends one event of key; refused, it says when to retry.
func (l *rateLimiter) take(key string) (bool, time.Duration) { return l.b.Take(key, l.r, 1) }

// logLimiter bounds the log lines strangers can cause: at most n a
// window; the next line let through says how many were dropped.
type logLimiter struct {
	log    *slog.Logger
	n      int
	window time.Duration
	now    func() time.Time

	mu         sync.Mutex
	start      time.Time
	count      int
	suppressed int
}

func newLogLimiter(log *slog.Logger, n int, window time.Duration, now func() time.Time) *logLimiter {
	return &logLimiter{log: log, n: n, window: window, now: now}
}

// Log writes the line unless the window's lines are used up.
func (l *logLimiter) Log(level slog.Level, msg string, args ...any) {
	l.mu.Lock()
	now := l.now()
	if now.Sub(l.start) >= l.window {
		l.start, l.count = now, 0
	}
	if l.count >= l.n {
		l.suppressed++
		l.mu.Unlock()
		return
	}
	l.count++
	if l.suppressed > 0 {
		args = append(args, "suppressed_before", l.suppressed)
		l.suppressed = 0
	}
	l.mu.Unlock()
	l.log.Log(context.Background(), level, msg, args...)
}

// Package keyrate is roomrelay's one token bucket: a golang.org/x/time/rate
// limiter per key (a project and kind, a client token, the audit of
// refusals), in bounded memory, on an injected clock so tests need not wait.
package keyrate

import (
	"sync"
	"time"

	"golang.org/x/time/rate"
)

// Rate is a bucket's shape: Limit tokens a second up to Burst.
type Rate struct {
	Limit rate.Limit
	Burst int
}

// Per is events per period as a Rate with that burst.
func Per(events int, period time.Duration, burst int) Rate {
	return Rate{Limit: rate.Limit(float64(events) / period.Seconds()), Burst: burst}
}

// Buckets holds one bucket per key, each starting full. It is safe for
// concurrent use.
type Buckets struct {
	now     func() time.Time
	maxKeys int

	mu     sync.Mutex
	latest time.Time // the clock never steps back for a bucket: a step back adds nothing
	m      map[string]*rate.Limiter
}

// New returns Buckets keeping at most maxKeys keys (0: no bound; for a
// key set the caller bounds itself) on the clock now (time.Now if nil).
func New(maxKeys int, now func() time.Time) *Buckets {
	if now == nil {
		now = time.Now
	}
	return &Buckets{now: now, maxKeys: maxKeys, m: map[string]*rate.Limiter{}}
}

// Take takes n tokens from key's bucket of shape r, all or none. Refused,
// it says how long until n tokens would be there. A bucket whose shape
// changed since the last call (a policy reload) keeps its tokens, capped
// by the new burst. n over the burst is always refused (its wait is
// still the time n tokens take at the rate, so a message stays finite).
func (b *Buckets) Take(key string, r Rate, n int) (bool, time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if now.Before(b.latest) {
		now = b.latest
	}
	b.latest = now
	l := b.m[key]
	if l == nil {
		b.makeRoom(now)
		l = rate.NewLimiter(r.Limit, r.Burst)
		b.m[key] = l
	} else {
		if l.Limit() != r.Limit {
			l.SetLimitAt(now, r.Limit)
		}
		if l.Burst() != r.Burst {
			l.SetBurstAt(now, r.Burst)
		}
	}
	if l.AllowN(now, n) {
		return true, 0
	}
	if r.Limit <= 0 {
		return false, rate.InfDuration
	}
	missing := float64(n) - l.TokensAt(now)
	return false, time.Duration(missing / float64(r.Limit) * float64(time.Second))
}

// makeRoom keeps the map under maxKeys: full buckets go first (forgetting
// them changes nothing), then every bucket, which starts full again.
func (b *Buckets) makeRoom(now time.Time) {
	if b.maxKeys <= 0 || len(b.m) < b.maxKeys {
		return
	}
	for k, l := range b.m {
		if l.TokensAt(now) >= float64(l.Burst()) {
			delete(b.m, k)
		}
	}
	if len(b.m) >= b.maxKeys {
		clear(b.m)
	}
}

// Len is how many keys are held, for tests and metrics.
func (b *Buckets) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}

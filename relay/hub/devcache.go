package hub

import (
	"context"
	"slices"
	"sync"
	"time"
)

// deviceAccess is what a command needs to know about its device: that it
// exists, is not revoked, and is enrolled for the command's project.
type deviceAccess struct {
	revoked  bool
	projects []string
	at       time.Time // when it was read from the devices bucket
}

// deviceCache keeps deviceAccess per device so a command costs no KV read.
// An entry is dropped on every node when the device is revoked or enrolled
// for another project (the ctl message every node already receives), and
// read again after Config.DeviceCacheTTL in any case: that bounds how long a
// lost invalidation (a NATS disconnect at the wrong moment) can keep a
// stale entry. The revoking node forgets its entry before it answers, and a
// revoked device's sockets are closed on every node anyway.
//
// Only devices that were sent commands are cached, so its size follows the
// commanded devices, bounded by maxCachedDevices.
type deviceCache struct {
	ttl time.Duration
	now func() time.Time

	mu sync.Mutex
	m  map[string]*deviceAccess
	// gen counts forgets, so a read that began before one does not store
	// what it read (it may predate the change).
	gen map[string]uint64
}

const maxCachedDevices = 100_000

func newDeviceCache(ttl time.Duration, now func() time.Time) *deviceCache {
	return &deviceCache{ttl: ttl, now: now, m: make(map[string]*deviceAccess), gen: make(map[string]uint64)}
}

// get returns the device's access record, reading it with load when it is
// not cached or too old. A not-found device is not cached (it may enroll).
func (c *deviceCache) get(ctx context.Context, id string, load func(context.Context, string) (*deviceRec, error)) (*deviceAccess, error) {
	now := c.now()
	c.mu.Lock()
	if a, ok := c.m[id]; ok && now.Sub(a.at) < c.ttl {
		c.mu.Unlock()
		return a, nil
	}
	gen := c.gen[id]
	c.mu.Unlock()

	d, err := load(ctx, id)
	if err != nil {
		return nil, err
	}
	a := &deviceAccess{revoked: d.Revoked, projects: slices.Clone(d.Projects), at: now}
	c.mu.Lock()
	if c.gen[id] == gen {
		if len(c.m) >= maxCachedDevices {
			clear(c.m) // rare; rebuilt by the next commands
		}
		c.m[id] = a
	}
	c.mu.Unlock()
	return a, nil
}

// forget drops the device's entry (its record changed).
func (c *deviceCache) forget(id string) {
	c.mu.Lock()
	delete(c.m, id)
	c.gen[id]++
	if len(c.gen) > maxCachedDevices {
		// Generations only matter for reads in flight; a reset at worst
		// lets one such read store what it read, which the TTL bounds.
		clear(c.gen)
	}
	c.mu.Unlock()
}

func (a *deviceAccess) hasProject(p string) bool { return slices.Contains(a.projects, p) }

package hub

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
)

// Connect-time work, kept to what a reconnect storm can afford: a token's
// device id is cached (the mapping never changes), the device record is
// read once and written back only when the hello changed it, and a revoke
// that lands while a session sets up is caught by this node's record of
// recent revokes instead of a second read.

// maxTokenCache bounds the token cache; past it, the cache starts over.
const maxTokenCache = 1 << 17

// tokenCache maps a device token's hash to its device id. A revoke marks
// the device, not the token, and token hashes are never rewritten, so an
// entry stays true for the life of the hub.
type tokenCache struct {
	mu sync.Mutex
	m  map[[32]byte]string
}

func (c *tokenCache) get(k [32]byte) (string, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	id, ok := c.m[k]
	return id, ok
}

func (c *tokenCache) put(k [32]byte, id string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= maxTokenCache {
		c.m = make(map[[32]byte]string)
	}
	c.m[k] = id
}

// authAgent returns the device a connecting agent's bearer token belongs
// to and the record's revision, or errNoToken / errBadToken /
// errRevokedToken, like authDevice.
func (h *Hub) authAgent(ctx context.Context, r *http.Request) (*deviceRec, uint64, error) {
	tok := bearer(r)
	if tok == "" {
		return nil, 0, errNoToken
	}
	key := secretSum("token", tok)
	id, ok := h.tokenDevs.get(key)
	if !ok {
		tr, _, err := getJSON[tokenRec](ctx, h.st.tokens, hex.EncodeToString(key[:]))
		if errors.Is(err, jetstream.ErrKeyNotFound) {
			return nil, 0, errBadToken
		}
		if err != nil {
			return nil, 0, fmt.Errorf("look up token: %w", err)
		}
		id = tr.DeviceID
		h.tokenDevs.put(key, id)
	}
	if d, rev, ok := h.devMirror.get(id); ok {
		h.metrics.connectRead("mirror")
		if d.Revoked {
			return nil, 0, errRevokedToken
		}
		return d, rev, nil
	}
	h.metrics.connectRead("bucket")
	gen := h.devMirror.generation()
	d, rev, err := getJSON[deviceRec](ctx, h.st.devices, id)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, errBadToken
	}
	if err != nil {
		return nil, 0, fmt.Errorf("look up device: %w", err)
	}
	h.devMirror.fill(cloneDevice(d), rev, gen) // the next connect reads memory
	if d.Revoked {
		return nil, 0, errRevokedToken
	}
	return d, rev, nil
}

// applyHello records what a hello says about the device.
func (h *Hub) applyHello(d *deviceRec, hello *relay.Hello) {
	d.AgentVersion, d.Policy, d.LastSeen = relay.CleanLine(hello.AgentVersion, maxAgentVersion), cleanPolicy(d, hello.Policy), h.cfg.Now().UTC()
	if os := relay.CleanLine(hello.OS, maxOS); os != "" {
		d.OS = os
	}
}

// recordHello writes the hello's facts into the device record read at
// authentication (revision rev), unless they are what it already says: a
// reconnect usually changes nothing, and last_seen is written when the
// session ends. A record changed meanwhile (a revoke, an event) is read
// again; a revoked device is errRevokedToken.
func (h *Hub) recordHello(ctx context.Context, d *deviceRec, rev uint64, hello *relay.Hello) (*deviceRec, error) {
	next := *d
	h.applyHello(&next, hello)
	moved := advanceAuditHead(&next, hello.AuditHead, h.cfg.Now().UTC())
	if !moved && !d.LastSeen.IsZero() && next.AgentVersion == d.AgentVersion && next.OS == d.OS && samePolicy(next.Policy, d.Policy) {
		return d, nil
	}
	gen := h.devMirror.generation()
	nrev, err := h.st.devices.Update(ctx, d.ID, mustJSON(&next), rev)
	if err == nil {
		h.devMirror.fill(cloneDevice(&next), nrev, gen)
		return &next, nil
	}
	if !isRevMismatch(err) {
		return nil, fmt.Errorf("record hello: %w", err)
	}
	return h.st.updateDevice(ctx, d.ID, func(d *deviceRec) error {
		if d.Revoked {
			return errRevokedToken
		}
		h.applyHello(d, hello)
		advanceAuditHead(d, hello.AuditHead, h.cfg.Now().UTC())
		return nil
	})
}

func samePolicy(a, b []relay.ProjectPolicy) bool {
	return slices.EqualFunc(a, b, func(x, y relay.ProjectPolicy) bool {
		return x.Project == y.Project && slices.Equal(x.Commands, y.Commands)
	})
}

// revokeMemory is how long this node remembers a revoke for sessions still
// setting up: longer than any authentication-to-registration gap (the hello
// wait is bounded by HelloTimeout).
const revokeMemory = 5 * time.Minute

// noteRevoked records a revoke and returns the device's sessions here to
// close. One critical section with register: a session that registers
// after it sees the revoke, one registered before is in the list.
func (h *Hub) noteRevoked(dev string) []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	now := time.Now()
	if h.revoked == nil {
		h.revoked = map[string]time.Time{}
	}
	for d, at := range h.revoked {
		if now.Sub(at) > revokeMemory {
			delete(h.revoked, d)
		}
	}
	h.revoked[dev] = now
	return slices.Clone(h.byDev[dev])
}

// closeRevoked applies a revoke on this node: the device's cached access
// goes, its mirrored record is marked revoked, its sessions here close, and
// sessions still setting up are refused (noteRevoked). The revoke message
// and the device watch both call it; the second call finds nothing left to
// close.
func (h *Hub) closeRevoked(dev string) {
	h.devs.forget(dev)
	h.devMirror.markRevoked(dev)
	for _, s := range h.noteRevoked(dev) {
		s.closeWith(relay.CloseRevoked, "this device's token was revoked; enroll it again")
	}
}

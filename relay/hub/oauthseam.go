package hub

import (
	"context"
	"errors"
	"net/http"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// What the OAuth authorization server (relay/hub/oauth) uses of the hub: its
// buckets, its metrics registry, device-token authentication, the admin
// guard and the error writer. The hub owns the buckets (buckets.go) so
// they are created, replicated and counted like every other; the oauth
// package owns what is in them.

// OAuthBuckets are the OAuth server's KV buckets. Each is wrapped like the
// hub's own: failures counted, and in a replicated bucket a "not found"
// confirmed with the stream leader (kvleader.go), so a code made on one
// node is found on another at once.
type OAuthBuckets struct {
	Clients, Flow, Grants, Tokens, Approvers, Sessions jetstream.KeyValue
}

// ErrNotReady is a call made before the hub's Run set up its stores.
var ErrNotReady = errors.New("hub: not ready (Run has not set up the stores yet)")

// OAuthBuckets returns the OAuth buckets once the hub is ready.
func (h *Hub) OAuthBuckets() (OAuthBuckets, error) {
	select {
	case <-h.ready:
		return h.st.oauth, nil
	default:
		return OAuthBuckets{}, ErrNotReady
	}
}

// Registerer is this hub's Prometheus registry, for components mounted
// beside it (their metrics then appear at /metrics).
func (h *Hub) Registerer() prometheus.Registerer { return h.metrics.reg }

// AuthDevice returns the device a device token belongs to; a bad or
// revoked token is an error WriteError answers 401.
func (h *Hub) AuthDevice(ctx context.Context, token string) (*hubapi.DeviceSelf, error) {
	if token == "" {
		return nil, errNoToken
	}
	d, err := h.st.deviceForToken(ctx, token)
	if err != nil {
		return nil, err
	}
	return &hubapi.DeviceSelf{DeviceID: d.ID, Projects: d.Projects, ServerTime: h.cfg.Now().UTC()}, nil
}

// ErrDeviceGone is a device that is revoked, unknown, or no longer
// enrolled for the project.
var ErrDeviceGone = errors.New("the device is revoked or not enrolled for the project")

// DeviceActive checks that device exists, is not revoked and is enrolled
// for project. It reads the node's device cache (devcache.go), which every
// node drops at a revoke, so a grant bound to a revoked device stops at
// its next request.
func (h *Hub) DeviceActive(ctx context.Context, device, project string) error {
	if !deviceIDRe.MatchString(device) {
		return ErrDeviceGone
	}
	a, err := h.devs.get(ctx, device, h.st.device)
	if errors.Is(err, jetstream.ErrKeyNotFound) || errors.Is(err, errNoDevice) {
		return ErrDeviceGone
	}
	if err != nil {
		return unavailable("read the device", err)
	}
	if a.revoked || !a.hasProject(project) {
		return ErrDeviceGone
	}
	return nil
}

// ValidProject reports whether p is a well-formed project id.
func ValidProject(p string) bool { return projectRe.MatchString(p) }

// Admin guards fn with the admin token, as the hub's own admin endpoints.
func (h *Hub) Admin(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return h.admin(fn)
}

// API adapts a handler that returns its error (answered by WriteError).
func (h *Hub) API(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return h.api(fn)
}

// WriteError answers err the way the hub's API does: an *Error as it
// says, a device-token failure 401, a storage failure 503.
func (h *Hub) WriteError(w http.ResponseWriter, r *http.Request, err error) { h.writeErr(w, r, err) }

// Unavailable wraps a storage failure so WriteError answers 503 with what
// failed and logs the cause.
func Unavailable(what string, err error) error { return unavailable(what, err) }

// Bearer is the request's bearer token, or "".
func Bearer(r *http.Request) string { return bearer(r) }

// GetJSON reads key and decodes it into a T, with the entry's revision for
// a later compare-and-set: the hub's own KV read, for the OAuth store.
func GetJSON[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	return getJSON[T](ctx, kv, key)
}

// GetLatestJSON is GetJSON as the stream's leader has the key, in a
// replicated bucket: for the grant every OAuth request reads, so a grant
// revoked on one node is refused on every other at its next request, not
// only once the replica that happens to answer has applied the revocation.
func GetLatestJSON[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	return getJSON[T](ctx, latest(kv), key)
}

// MustJSON encodes one of the hub's own plain record structs.
func MustJSON(v any) []byte { return mustJSON(v) }

package hub

import (
	"context"
	"errors"
	"net/http"
	"net/netip"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// What the OAuth authorization server (relay/hub/oauth) uses of the hub: its
// buckets (behind the oauth package's JetStream store), its metrics
// registry, device-token authenticated and admin-guarded handlers, and the
// 503 of a storage failure. The hub owns the buckets (buckets.go) so
// they are created, replicated and counted like every other; the oauth
// package owns what is in them.

// OAuthBuckets are the OAuth server's KV buckets. Each is wrapped like the
// hub's own: failures counted, and in a replicated bucket a "not found"
// confirmed with the stream leader (kvleader.go), so a code made on one
// node is found on another at once.
type OAuthBuckets struct {
	Clients, Flow, Grants, Tokens, Approvers, Sessions jetstream.KeyValue
	// GrantsLatest is Grants read as its stream's leader has it: for the
	// grant every OAuth request reads, so a grant revoked on one node is
	// refused on every other at its next request, not only once the
	// replica that happens to answer has applied the revocation.
	GrantsLatest jetstream.KeyValue
}

// ErrNotReady is a call made before the hub's Run set up its stores.
var ErrNotReady = errors.New("hub: not ready (Run has not set up the stores yet)")

// OAuthBuckets returns the OAuth buckets once the hub is ready.
func (h *Hub) OAuthBuckets() (OAuthBuckets, error) {
	select {
	case <-h.ready:
		b := h.st.oauth
		b.GrantsLatest = latest(b.Grants)
		return b, nil
	default:
		return OAuthBuckets{}, ErrNotReady
	}
}

// Registerer is this hub's Prometheus registry, for components mounted
// beside it (their metrics then appear at /metrics).
func (h *Hub) Registerer() prometheus.Registerer { return h.metrics.reg }

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

// Admin guards fn with the admin token, as the hub's own admin endpoints.
func (h *Hub) Admin(fn func(http.ResponseWriter, *http.Request) error) http.HandlerFunc {
	return h.admin(fn)
}

// DeviceAPI serves fn for a device: the request's bearer token must be
// a live device token (else 401), and fn's error is answered the way the
// hub's API answers (an *Error as it says, a storage failure 503).
func (h *Hub) DeviceAPI(fn func(http.ResponseWriter, *http.Request, *hubapi.DeviceSelf) error) http.HandlerFunc {
	return h.api(func(w http.ResponseWriter, r *http.Request) error {
		d, err := h.authDevice(r.Context(), r)
		if err != nil {
			return err
		}
		return fn(w, r, &hubapi.DeviceSelf{DeviceID: d.ID, Projects: d.Projects, ServerTime: h.cfg.Now().UTC()})
	})
}

// Unavailable wraps a storage failure so the hub's error writer answers 503 with what
// failed and logs the cause.
func Unavailable(what string, err error) error { return unavailable(what, err) }

// ClientPrefix is the client prefix a request's address (ClientAddr) is
// bounded by, as the connection caps count it: an IPv4 address, or an
// IPv6 /64 (one subscriber's allocation).
func ClientPrefix(addr string) string {
	key, _ := clientKey(addr)
	return key
}

// ClientAggregate is the wider block around a client prefix, for limits a
// prefix is too cheap to change for: an IPv4 /24, an IPv6 /48.
func ClientAggregate(addr string) string {
	a, err := netip.ParseAddr(addr)
	if err != nil {
		return addr
	}
	a = a.Unmap().WithZone("")
	bits := 24
	if a.Is6() {
		bits = 48
	}
	p, _ := a.Prefix(bits)
	return p.String()
}

package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"runtime"
	"strings"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

// Config configures an Agent. Zero values get the defaults documented per field.
type Config struct {
	// HubURL is the hub's base URL: https:// or wss:// (http:// and ws:// only
	// for loopback hosts, for development and tests).
	HubURL string
	// DeviceID and Token identify the device; the CLI reads the token from
	// the credential store. Both are required.
	DeviceID string
	Token    string
	// StateDir holds status.json, the dedupe database and the event outbox.
	StateDir string
	// Version is the agent version sent in hello ("dev" if empty).
	Version string
	// OS is sent in hello (runtime.GOOS if empty).
	OS string
	// MaxInFlight bounds concurrently handled commands (default 64, as the
	// policy's); commands beyond it are answered busy at once. The daemon
	// sets it from the policy (SetMaxInFlight).
	MaxInFlight int
	// MaxFrame bounds a frame in either direction (default relay.DefaultMaxFrame).
	MaxFrame int
	// Backoff shapes reconnect delays.
	Backoff Backoff
	// MaxDrainWait bounds the reconnect delay a hub's drain frame may ask
	// for (default 5 minutes).
	MaxDrainWait time.Duration
	// Clock is the time source (RealClock if nil).
	Clock Clock
	// TLSConfig is the client TLS configuration of the default dialer, for
	// a hub whose certificate a private CA signed (nil: the system's roots).
	TLSConfig *tls.Config
	// Dial opens the websocket (default: gorilla's dialer with the relay
	// subprotocol, TLSConfig and the environment's proxy settings).
	Dial func(ctx context.Context, url string, header http.Header) (*websocket.Conn, *http.Response, error)
	// Rand returns a uniformly random int64 in [0, n) for backoff jitter
	// (math/rand/v2 if nil).
	Rand func(n int64) int64
	// Policy returns the policy summary sent in hello (empty if nil).
	Policy func() []relay.ProjectPolicy
	// Rooms returns the room directory sent in hello: the rooms the device
	// serves (nil Rooms: the hello carries an empty directory).
	Rooms func(ctx context.Context) []relay.RoomEntry
	// Provider returns the room provider's state sent in hello (nil: none
	// sent, which a hub reads as builtin).
	Provider func() *relay.ProviderState
	// AuditHead returns where the audit log ends, sent in hello and on
	// every result frame (asked after Audit) so the hub keeps an anchor
	// off the device (nil, or a nil result: none sent).
	AuditHead func() *relay.AuditHead
	// Guard is asked before a handler runs; a non-nil error denies the
	// command without running it. A *relay.Error keeps its code; any other
	// error denies with command_not_allowed.
	Guard func(ctx context.Context, cmd *relay.Command) error
	// Audit is told about every delivery of a command that reaches the
	// agent, allowed or denied, including expired, busy and redelivered ones.
	// refused says the Guard refused the command (a policy decision, whatever
	// the result's code: a hidden room's not_found reads like a missing
	// one's); every duplicate delivery of that command gets the same verdict.
	Audit func(cmd *relay.Command, res *relay.Result, dur time.Duration, refused bool)
	// Notes are standing conditions the owner should know of (e.g. "no
	// sandbox: ..."), shown by `roomrelay status` for as long as this agent runs.
	Notes []string
	// OnStatus, if set, is called with the new status after every state
	// change (not counter updates), on the goroutine that made it; it must
	// not block (the local API publishes a status event).
	OnStatus func(Status)
	// Logger receives the agent's logs (discarded if nil).
	Logger *slog.Logger

	// HandshakeTimeout bounds dialing plus waiting for welcome (default 15 s).
	HandshakeTimeout time.Duration
	// ShutdownGrace is how long Run waits for in-flight commands on shutdown
	// before cancelling them (default 2 s).
	ShutdownGrace time.Duration
	// WakeCheck is the wake detector's period and WakeThreshold how far the
	// wall clock must run ahead of the monotonic clock between two checks to
	// count as a wake from sleep (defaults DefaultWakeCheck and 10 s). The
	// detector ticks only while the OS does not report sleep and wake
	// (Agent.SetOSWakeNotices).
	WakeCheck     time.Duration
	WakeThreshold time.Duration
	// DedupeTTL and DedupeMax bound the dedupe store: entries older than the
	// TTL are dropped, and beyond DedupeMax finished entries (or
	// DedupeMaxBytes of stored results) the oldest go first (defaults 24 h,
	// 10,000 and 64 MiB).
	DedupeTTL      time.Duration
	DedupeMax      int
	DedupeMaxBytes int64
	// MaxQueuedEvents bounds the offline event outbox (default 1,000).
	MaxQueuedEvents int
}

// Backoff shapes reconnect delays: the n-th consecutive failure waits a
// uniformly random time in [0, min(Cap, Base·2^n)] ("full jitter", so a fleet
// reconnecting after a hub deploy spreads out). The count resets only after a
// connection stayed up for ResetAfter.
type Backoff struct {
	Base       time.Duration // default 1 s
	Cap        time.Duration // default 60 s
	ResetAfter time.Duration // default 30 s
}

// DefaultBackoff is the reconnect shape a zero Config.Backoff gets.
var DefaultBackoff = Backoff{Base: time.Second, Cap: 60 * time.Second, ResetAfter: 30 * time.Second}

// DefaultMaxDrainWait bounds a drain frame's delay when Config.MaxDrainWait
// is zero.
const DefaultMaxDrainWait = 5 * time.Minute

// Max returns the upper bound of the delay after the given number of
// consecutive failures (0 for the first).
func (b Backoff) Max(attempt int) time.Duration {
	if attempt < 0 {
		attempt = 0
	}
	d := b.Base
	for i := 0; i < attempt; i++ {
		if d >= b.Cap/2 {
			return b.Cap
		}
		d *= 2
	}
	return min(d, b.Cap)
}

func (c *Config) setDefaults() {
	if c.Version == "" {
		c.Version = "dev"
	}
	if c.OS == "" {
		c.OS = runtime.GOOS
	}
	if c.MaxInFlight <= 0 {
		c.MaxInFlight = DefaultMaxInFlight
	}
	if c.MaxFrame <= 0 {
		c.MaxFrame = relay.DefaultMaxFrame
	}
	if c.Backoff.Base <= 0 {
		c.Backoff.Base = DefaultBackoff.Base
	}
	if c.Backoff.Cap <= 0 {
		c.Backoff.Cap = DefaultBackoff.Cap
	}
	if c.Backoff.Cap < c.Backoff.Base {
		c.Backoff.Cap = c.Backoff.Base
	}
	if c.Backoff.ResetAfter <= 0 {
		c.Backoff.ResetAfter = DefaultBackoff.ResetAfter
	}
	if c.MaxDrainWait <= 0 {
		c.MaxDrainWait = DefaultMaxDrainWait
	}
	if c.Clock == nil {
		c.Clock = RealClock()
	}
	if c.Rand == nil {
		c.Rand = rand.Int64N
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.HandshakeTimeout <= 0 {
		c.HandshakeTimeout = 15 * time.Second
	}
	if c.ShutdownGrace <= 0 {
		c.ShutdownGrace = 2 * time.Second
	}
	if c.WakeCheck <= 0 {
		c.WakeCheck = DefaultWakeCheck()
	}
	if c.WakeThreshold <= 0 {
		c.WakeThreshold = 10 * time.Second
	}
	if c.DedupeTTL <= 0 {
		c.DedupeTTL = 24 * time.Hour
	}
	if c.DedupeMax <= 0 {
		c.DedupeMax = 10000
	}
	if c.DedupeMaxBytes <= 0 {
		c.DedupeMaxBytes = 64 << 20
	}
	if c.MaxQueuedEvents <= 0 {
		c.MaxQueuedEvents = 1000
	}
	if c.Dial == nil {
		d := &websocket.Dialer{
			Proxy:            http.ProxyFromEnvironment,
			HandshakeTimeout: c.HandshakeTimeout,
			Subprotocols:     []string{relay.Subprotocol},
			TLSClientConfig:  c.TLSConfig,
			ReadBufferSize:   4096,
			WriteBufferSize:  4096,
		}
		c.Dial = d.DialContext
	}
}

// ConnectURL turns a hub base URL into the websocket URL the agent dials. It
// refuses anything but wss:// (or https://) unless the host is a loopback
// address, because the upgrade request carries the device token.
func ConnectURL(hub string) (string, error) {
	u, err := url.Parse(strings.TrimSpace(hub))
	if err != nil {
		return "", fmt.Errorf("hub URL %q: %w", hub, err)
	}
	if u.Host == "" {
		return "", fmt.Errorf("hub URL %q has no host; use e.g. https://hub.example.com", hub)
	}
	if u.User != nil {
		return "", fmt.Errorf("hub URL must not carry credentials; the device token is sent as a bearer header")
	}
	switch u.Scheme {
	case "https", "wss":
		u.Scheme = "wss"
	case "http", "ws":
		if !isLoopback(u.Hostname()) {
			return "", fmt.Errorf("hub URL %q is not encrypted: use https:// or wss:// (plain http/ws is only allowed for loopback hosts)", hub)
		}
		u.Scheme = "ws"
	default:
		return "", fmt.Errorf("hub URL %q: scheme must be https or wss (http/ws for loopback only)", hub)
	}
	u.Path = strings.TrimRight(u.Path, "/") + relay.ConnectPath
	u.RawPath = ""
	u.RawQuery = ""
	u.Fragment = ""
	return u.String(), nil
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (c *Config) validate() error {
	var errs []error
	if _, err := ConnectURL(c.HubURL); err != nil {
		errs = append(errs, err)
	}
	if c.DeviceID == "" {
		errs = append(errs, errors.New("device id is empty: enroll the device first (`roomrelay enroll`)"))
	}
	if c.Token == "" {
		errs = append(errs, errors.New("device token is empty: enroll the device first (`roomrelay enroll`)"))
	}
	if c.StateDir == "" {
		errs = append(errs, errors.New("state directory is empty"))
	}
	return errors.Join(errs...)
}

// DefaultWakeCheck is the wall-clock wake detector's default period: 5 s,
// and 30 s on macOS. The detector is the only wake notice on macOS (its
// IOKit notifications need cgo) and on Linux without logind; a wake is
// noticed within one period there. macOS laptops sleep often and for long,
// so there a longer period (2 wakeups a minute instead of 12) is worth a
// reconnect up to 30 s after the lid opens; the other systems without
// notices are mostly servers and containers, which rarely sleep, so 5 s
// costs little.
func DefaultWakeCheck() time.Duration {
	if runtime.GOOS == "darwin" {
		return 30 * time.Second
	}
	return 5 * time.Second
}

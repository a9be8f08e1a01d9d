package hub

import (
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Config configures a hub. Zero values take the documented defaults.
type Config struct {
	// DataDir holds the embedded NATS server's JetStream store ("nats/").
	// Required unless NATSURL is set.
	DataDir string
	// NATSURL connects to an external NATS server with JetStream instead of
	// starting an embedded one.
	NATSURL string
	// NATSCreds and NATSTLSCA are files for an operated external cluster:
	// a user credentials file and a CA to verify the servers' certificates.
	NATSCreds string
	NATSTLSCA string
	// Replicas is the replica count of every bucket and stream the hub
	// creates (default 1 with the embedded server, 3 with NATSURL). A bucket
	// an operator gave more replicas keeps them: the hub only raises it.
	Replicas int
	// StorageBudget is what the hub reserves on each JetStream server for
	// all its buckets and the events stream (MaxBytes, split by the shares
	// in buckets.go; default DefaultStorageBudget, at least
	// MinStorageBudget). A server's max_file_store must have room for it.
	StorageBudget int64
	// StartupTimeout bounds the retries of the first NATS connect and the
	// JetStream setup (default 2 min).
	StartupTimeout time.Duration
	// TrustedProxies are the peers whose X-Forwarded-For is believed for the
	// client address (enrollment limit, MCP front, logs). None by default.
	TrustedProxies []netip.Prefix
	// AdminToken guards the admin endpoints. Required.
	AdminToken string
	// Heartbeat is the ping interval (default 25 s); the read deadline is 2.5×.
	Heartbeat time.Duration
	// MaxFrame bounds an agent frame (default relay.DefaultMaxFrame).
	MaxFrame int
	// PairingTTL is a pairing code's default lifetime (default 10 min).
	PairingTTL time.Duration
	// EnrollFailures failed enrollments (unknown, used, expired or malformed
	// code) from one client address within EnrollWindow make further
	// attempts from it 429 rate_limited until the window ends (defaults 10
	// per 10 minutes).
	EnrollFailures int
	EnrollWindow   time.Duration
	// NodeName names this hub node in presence records (default: hostname).
	NodeName string
	// DrainSpread bounds the random reconnect delay given to agents on
	// shutdown (default 5 s), so they do not come back in a herd.
	DrainSpread time.Duration
	// DrainGrace is how long shutdown waits, beyond DrainSpread, for agents
	// to move their sessions elsewhere and close these before it closes
	// them (default 2 s).
	DrainGrace time.Duration
	// DeviceCacheTTL bounds how long a node serves commands from a cached
	// device record (default 5 s); revocations and new projects reach every
	// node's cache at once through NATS, this bounds a lost message.
	DeviceCacheTTL time.Duration
	// NodeBeat is how often this node rewrites its liveness record (default
	// 1 s); four missed beats make other nodes treat it as dead.
	NodeBeat time.Duration
	// HelloTimeout bounds the wait for an agent's hello (default 10 s).
	HelloTimeout time.Duration
	// Logger receives the hub's logs (default: discarded).
	Logger *slog.Logger
	// Now is the clock for records and pairing expiry (default time.Now).
	Now func() time.Time
}

// Limits on what a caller may ask for.
const (
	DefaultHeartbeat      = 25 * time.Second
	DefaultPairingTTL     = hubapi.DefaultPairingTTL
	MaxPairingTTL         = hubapi.MaxPairingTTL
	DefaultCommandTimeout = hubapi.DefaultCommandTimeout
	MaxCommandTimeout     = hubapi.MaxCommandTimeout
)

func (c *Config) withDefaults() (Config, error) {
	cfg := *c
	if cfg.AdminToken == "" {
		return cfg, errors.New("hub: config: AdminToken is required")
	}
	if cfg.NATSURL == "" && cfg.DataDir == "" {
		return cfg, errors.New("hub: config: DataDir is required for the embedded NATS server")
	}
	switch {
	case cfg.Replicas < 0 || cfg.Replicas > 5:
		return cfg, fmt.Errorf("hub: config: replicas must be between 1 and 5 (JetStream's limit), not %d", cfg.Replicas)
	case cfg.Replicas > 1 && cfg.NATSURL == "":
		return cfg, fmt.Errorf("hub: config: the embedded NATS server is a single node and keeps 1 replica, not %d: use --nats with a cluster for more", cfg.Replicas)
	case cfg.Replicas == 0 && cfg.NATSURL == "":
		cfg.Replicas = 1
	case cfg.Replicas == 0:
		cfg.Replicas = 3
	}
	switch {
	case cfg.StorageBudget == 0:
		cfg.StorageBudget = DefaultStorageBudget
	case cfg.StorageBudget < MinStorageBudget:
		return cfg, fmt.Errorf("hub: config: the storage budget must be at least %d MiB, not %d bytes", MinStorageBudget>>20, cfg.StorageBudget)
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = 2 * time.Minute
	}
	if cfg.Heartbeat <= 0 {
		cfg.Heartbeat = DefaultHeartbeat
	}
	if cfg.MaxFrame <= 0 {
		cfg.MaxFrame = relay.DefaultMaxFrame
	}
	if cfg.PairingTTL <= 0 {
		cfg.PairingTTL = DefaultPairingTTL
	}
	if cfg.PairingTTL > MaxPairingTTL {
		cfg.PairingTTL = MaxPairingTTL
	}
	if cfg.EnrollFailures <= 0 {
		cfg.EnrollFailures = 10
	}
	if cfg.EnrollWindow <= 0 {
		cfg.EnrollWindow = 10 * time.Minute
	}
	if cfg.NodeName == "" {
		h, err := os.Hostname()
		if err != nil || h == "" {
			h = "hub"
		}
		cfg.NodeName = h
	}
	if cfg.DrainSpread <= 0 {
		cfg.DrainSpread = 5 * time.Second
	}
	if cfg.DrainGrace <= 0 {
		cfg.DrainGrace = 2 * time.Second
	}
	if cfg.DeviceCacheTTL <= 0 {
		cfg.DeviceCacheTTL = 5 * time.Second
	}
	if cfg.NodeBeat <= 0 {
		cfg.NodeBeat = time.Second
	}
	if cfg.HelloTimeout <= 0 {
		cfg.HelloTimeout = 10 * time.Second
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	return cfg, nil
}

// adminTokenFile is the admin token's file name inside the data dir.
const adminTokenFile = "admin-token"

// LoadOrCreateAdminToken reads the admin token from dataDir, or generates one
// and writes it with mode 0600 (the directory 0700) when there is none yet.
func LoadOrCreateAdminToken(dataDir string) (string, error) {
	path := filepath.Join(dataDir, adminTokenFile)
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("admin token file %s is empty: delete it to generate a new token", path)
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read admin token: %w", err)
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return "", fmt.Errorf("create data dir: %w", err)
	}
	tok := newSecret("rra_")
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return "", fmt.Errorf("create admin token: %w", err)
	}
	if _, err := f.WriteString(tok + "\n"); err != nil {
		f.Close()
		return "", fmt.Errorf("write admin token: %w", err)
	}
	if err := f.Close(); err != nil {
		return "", fmt.Errorf("write admin token: %w", err)
	}
	return tok, nil
}

// newSecret returns prefix + 256 random bits, base64url.
func newSecret(prefix string) string {
	var b [32]byte
	rand.Read(b[:]) // never fails (crypto/rand, Go 1.24+)
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// KV buckets and the events stream. Names are part of the hub's on-disk
// state: renaming one loses data on upgrade.
const (
	bucketDevices   = "rr_devices"   // device id → deviceRec
	bucketTokens    = "rr_tokens"    // sha256(token) hex → tokenRec
	bucketPairing   = "rr_pairing"   // sha256(code) hex → pairingRec
	bucketPresence  = "rr_presence"  // device id → presenceRec
	bucketProposals = "rr_proposals" // device id "." proposal id → proposal event
	bucketRooms     = "rr_rooms"     // b64(project) "." b64(room) "." device → roomRec
	bucketClients   = "rr_clients"   // "id." token id → clientTokenRec; "h." sha256(token) → token id
	bucketEnroll    = "rr_enroll"    // sha256(client address) → its failed enrollments in the window
	bucketNodes     = "rr_nodes"     // node name → nodeRec, refreshed every nodeBeat
	// The OAuth authorization server's state (relay/hub/oauth owns the
	// records; the hub only creates the buckets).
	bucketOAuthClients   = "rr_oauth_clients"   // "c." client id → registered client
	bucketOAuthFlow      = "rr_oauth_flow"      // pending requests, user codes, codes, login links
	bucketOAuthGrants    = "rr_oauth_grants"    // "g." grant id → grant
	bucketOAuthTokens    = "rr_oauth_tokens"    // "a."/"f." sha256(token) → access / refresh token
	bucketOAuthApprovers = "rr_oauth_approvers" // "a." approver id → approver
	bucketOAuthSessions  = "rr_oauth_sessions"  // "s." sha256(session) → approver browser session
	streamEvents         = "RR_EVENTS"          // subjects rr.events.>
)

// NATS subjects.
const (
	subjEvents = "rr.events" // rr.events.<device>.<event>
)

func cmdSubject(dev string) string       { return "rr.dev." + dev + ".cmd" }
func ctlSubject(dev string) string       { return "rr.dev." + dev + ".ctl" }
func eventSubject(dev, ev string) string { return subjEvents + "." + dev + "." + ev }

const ctlWildcard = "rr.dev.*.ctl"

// maxValueSize bounds one KV value or stored event (a decision event with
// its data is under 17 KiB; a device record with its policy well under).
const maxValueSize = 64 << 10

// pairingRetention bounds how long a pairing record (used or expired) is kept,
// so a late try still gets "expired"/"used" rather than "unknown".
const pairingRetention = 24 * time.Hour

type deviceRec struct {
	ID           string                `json:"id"`
	Name         string                `json:"name"`
	OS           string                `json:"os"`
	Projects     []string              `json:"projects"`
	CreatedAt    time.Time             `json:"created_at"`
	Revoked      bool                  `json:"revoked,omitempty"`
	RevokedAt    time.Time             `json:"revoked_at,omitzero"`
	TokenHash    string                `json:"token_hash"`
	AgentVersion string                `json:"agent_version,omitempty"`
	Policy       []relay.ProjectPolicy `json:"policy,omitempty"`
	LastSeen     time.Time             `json:"last_seen,omitzero"`
	AuditHead    *auditHeadRec         `json:"audit_head,omitempty"` // audithead.go
}

func (d *deviceRec) hasProject(p string) bool {
	for _, x := range d.Projects {
		if x == p {
			return true
		}
	}
	return false
}

type tokenRec struct {
	DeviceID  string    `json:"device_id"`
	CreatedAt time.Time `json:"created_at"`
}

type pairingRec struct {
	Project   string    `json:"project"`
	CreatedAt time.Time `json:"created_at"`
	ExpiresAt time.Time `json:"expires_at"`
	UsedAt    time.Time `json:"used_at,omitzero"`
	UsedBy    string    `json:"used_by,omitempty"`
}

// presenceRec is written only by the node holding the device's socket.
// StaleAfterMS travels with it so readers on other nodes (with another
// heartbeat) judge staleness the way the writer meant.
type presenceRec struct {
	State        string    `json:"state"`
	Session      string    `json:"session,omitempty"`
	Node         string    `json:"node,omitempty"`
	Since        time.Time `json:"since"`
	LastSeen     time.Time `json:"last_seen"`
	Refreshed    time.Time `json:"refreshed"`
	StaleAfterMS int64     `json:"stale_after_ms,omitempty"`
	// NodeStarted is the writing node's run (Hub.incarnation): a record of
	// an earlier run of a node that beats again is offline.
	NodeStarted time.Time `json:"node_started,omitzero"`
	// App is the desktop app's presence when the device's Rooms come from
	// it (hubapi.AppOpen, hubapi.AppClosed); "" for a builtin provider or
	// an agent that does not say.
	App string `json:"app,omitempty"`
}

// store wraps the KV buckets.
type store struct {
	devices, tokens, pairing, presence, proposals, rooms, clients, enroll, nodes jetstream.KeyValue
	oauth                                                                        OAuthBuckets

	nc         *nats.Conn
	replicated map[string]bool // bucket name → more than one replica
}

func getJSON[T any](ctx context.Context, kv jetstream.KeyValue, key string) (*T, uint64, error) {
	e, err := kv.Get(ctx, key)
	if err != nil {
		return nil, 0, err
	}
	var v T
	if err := json.Unmarshal(e.Value(), &v); err != nil {
		return nil, 0, fmt.Errorf("decode %s/%s: %w", kv.Bucket(), key, err)
	}
	return &v, e.Revision(), nil
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("hub: marshal %T: %v", v, err)) // only our own plain structs
	}
	return b
}

// updateDevice applies fn to a device record with compare-and-set, retrying
// when another writer got in between.
func (s *store) updateDevice(ctx context.Context, id string, fn func(*deviceRec) error) (*deviceRec, error) {
	for range 16 {
		d, rev, err := getJSON[deviceRec](ctx, s.devices, id)
		if err != nil {
			return nil, err
		}
		if err := fn(d); err != nil {
			return nil, err
		}
		if _, err := s.devices.Update(ctx, id, mustJSON(d), rev); err != nil {
			if isRevMismatch(err) {
				continue
			}
			return nil, fmt.Errorf("update device %s: %w", id, err)
		}
		return d, nil
	}
	return nil, fmt.Errorf("update device %s: too much contention", id)
}

// isRevMismatch reports a failed compare-and-set (Update with a stale
// revision, or Create of an existing key).
func isRevMismatch(err error) bool {
	return errors.Is(err, jetstream.ErrKeyRevisionMismatch) || errors.Is(err, jetstream.ErrKeyExists)
}

// hashSecret is how tokens and pairing codes are stored: never in clear.
func hashSecret(kind, secret string) string {
	sum := secretSum(kind, secret)
	return hex.EncodeToString(sum[:])
}

// secretSum is hashSecret's bytes, for an in-memory key (tokenCache).
func secretSum(kind, secret string) [32]byte {
	return sha256.Sum256([]byte("roomrelay/" + kind + "/" + secret))
}

// Crockford base32: no I, L, O, U, so a code read aloud is unambiguous.
const crockford = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"

// newPairingCode returns XXXX-XXXX (40 random bits).
func newPairingCode() string {
	var b [8]byte
	rand.Read(b[:])
	out := make([]byte, 0, 9)
	for i, x := range b {
		if i == 4 {
			out = append(out, '-')
		}
		out = append(out, crockford[int(x)%32])
	}
	return string(out)
}

// normalizeCode maps what a person typed to the canonical code: case,
// separators and the Crockford look-alikes (I/L → 1, O → 0) do not matter.
func normalizeCode(s string) (string, bool) {
	var out []byte
	for _, r := range strings.ToUpper(s) {
		switch r {
		case '-', ' ', '\t':
			continue
		case 'I', 'L':
			r = '1'
		case 'O':
			r = '0'
		}
		if r > 127 || strings.IndexByte(crockford, byte(r)) < 0 {
			return "", false
		}
		out = append(out, byte(r))
	}
	if len(out) != 8 {
		return "", false
	}
	return string(out[:4]) + "-" + string(out[4:]), true
}

// newID returns prefix + 16 lowercase Crockford characters (80 bits): safe as
// a NATS subject token and a KV key.
func newID(prefix string) string {
	var b [10]byte
	rand.Read(b[:])
	const alpha = "0123456789abcdefghjkmnpqrstvwxyz"
	out := make([]byte, 0, len(prefix)+16)
	out = append(out, prefix...)
	var acc uint64
	bits := 0
	for _, x := range b {
		acc = acc<<8 | uint64(x)
		bits += 8
		for bits >= 5 {
			bits -= 5
			out = append(out, alpha[(acc>>bits)&31])
		}
	}
	return string(out)
}

var (
	// Device ids become NATS subject tokens: no dots, wildcards or spaces.
	deviceIDRe = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,63}$`)
	// KV keys allow [-/_=.a-zA-Z0-9]; proposal ids outside that are not indexed.
	kvKeyRe     = regexp.MustCompile(`^[A-Za-z0-9_=-]{1,128}$`)
	eventNameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,63}$`)
)

// Domain methods: what the hub does with its buckets, so that handlers and
// the Go API never update raw keys themselves.

// createPairingCode stores a new code for rec and returns it in clear (the
// bucket keeps only its hash).
func (s *store) createPairingCode(ctx context.Context, rec pairingRec) (string, error) {
	for range 5 {
		code := newPairingCode()
		_, err := s.pairing.Create(ctx, hashSecret("pairing", code), mustJSON(rec))
		if isRevMismatch(err) {
			continue // hash collision with a live code: draw again
		}
		if err != nil {
			return "", fmt.Errorf("store pairing code: %w", err)
		}
		return code, nil
	}
	return "", errors.New("could not draw a free pairing code")
}

// Pairing code refusals, as the enrollment answers them.
var (
	errCodeUnknown = &Error{Code: hubapi.CodePairingCodeUnknown, Message: "no such pairing code; check it or ask for a new one with `roomrelay hub pair`"}
	errCodeUsed    = &Error{Code: hubapi.CodePairingCodeUsed, Message: "this pairing code was already used; ask for a new one with `roomrelay hub pair`"}
	errCodeExpired = &Error{Code: hubapi.CodePairingCodeExpired, Message: "this pairing code expired; ask for a new one with `roomrelay hub pair`"}
)

// spendPairingCode marks a live code used by devID with compare-and-set: of
// two concurrent enrollments with one code exactly one gets past it. It
// returns the code's record, or errCodeUnknown/Used/Expired.
func (s *store) spendPairingCode(ctx context.Context, code, devID string, now time.Time) (*pairingRec, error) {
	key := hashSecret("pairing", code)
	pr, rev, err := getJSON[pairingRec](ctx, s.pairing, key)
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		return nil, errCodeUnknown
	case err != nil:
		return nil, fmt.Errorf("read pairing code: %w", err)
	case !pr.UsedAt.IsZero():
		return nil, errCodeUsed
	case !now.Before(pr.ExpiresAt):
		return nil, errCodeExpired
	}
	pr.UsedAt, pr.UsedBy = now.UTC(), devID
	if _, err := s.pairing.Update(ctx, key, mustJSON(pr), rev); err != nil {
		if isRevMismatch(err) {
			return nil, errCodeUsed
		}
		return nil, fmt.Errorf("spend pairing code: %w", err)
	}
	return pr, nil
}

// unspendPairingCode gives a code back after the enrollment it was spent
// on failed to store the device, so the person can retry with it: only if
// devID still holds it.
func (s *store) unspendPairingCode(ctx context.Context, code, devID string) error {
	key := hashSecret("pairing", code)
	pr, rev, err := getJSON[pairingRec](ctx, s.pairing, key)
	if err != nil {
		return fmt.Errorf("read pairing code: %w", err)
	}
	if pr.UsedBy != devID {
		return nil
	}
	pr.UsedAt, pr.UsedBy = time.Time{}, ""
	if _, err := s.pairing.Update(ctx, key, mustJSON(pr), rev); err != nil {
		return fmt.Errorf("give the pairing code back: %w", err)
	}
	return nil
}

// createDevice stores a new device and its token's hash. If the token
// cannot be stored the device is removed again, so a failed enrollment
// leaves no device nobody can connect as.
func (s *store) createDevice(ctx context.Context, d deviceRec, token string) error {
	d.TokenHash = hashSecret("token", token)
	if _, err := s.devices.Create(ctx, d.ID, mustJSON(d)); err != nil {
		return fmt.Errorf("create device: %w", err)
	}
	if _, err := s.tokens.Create(ctx, d.TokenHash, mustJSON(tokenRec{DeviceID: d.ID, CreatedAt: d.CreatedAt})); err != nil {
		if derr := s.devices.Purge(context.WithoutCancel(ctx), d.ID); derr != nil {
			return errors.Join(fmt.Errorf("store token hash: %w", err), fmt.Errorf("remove half-created device: %w", derr))
		}
		return fmt.Errorf("store token hash: %w", err)
	}
	return nil
}

// Device authentication failures.
var (
	errNoToken      = errors.New("no bearer token")
	errBadToken     = errors.New("the token is not valid for this hub")
	errRevokedToken = errors.New("the device was revoked; enroll it again")
)

// deviceForToken returns the device a bearer token belongs to, or
// errBadToken / errRevokedToken.
func (s *store) deviceForToken(ctx context.Context, token string) (*deviceRec, error) {
	tr, _, err := getJSON[tokenRec](ctx, s.tokens, hashSecret("token", token))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errBadToken
	}
	if err != nil {
		return nil, fmt.Errorf("look up token: %w", err)
	}
	d, _, err := getJSON[deviceRec](ctx, s.devices, tr.DeviceID)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errBadToken
	}
	if err != nil {
		return nil, fmt.Errorf("look up device: %w", err)
	}
	if d.Revoked {
		return nil, errRevokedToken
	}
	return d, nil
}

// device reads one device record.
func (s *store) device(ctx context.Context, id string) (*deviceRec, error) {
	d, _, err := getJSON[deviceRec](ctx, s.devices, id)
	return d, err
}

// addProject enrolls an existing, unrevoked device for one more project.
func (s *store) addProject(ctx context.Context, devID, project string) (*deviceRec, error) {
	return s.updateDevice(ctx, devID, func(d *deviceRec) error {
		if d.Revoked {
			return errRevokedToken
		}
		if !d.hasProject(project) {
			d.Projects = append(d.Projects, project)
		}
		return nil
	})
}

// revokeDevice marks a device revoked (idempotent). The token hash stays,
// mapped to the revoked device, so a later use is answered "revoked" rather
// than "unknown token".
func (s *store) revokeDevice(ctx context.Context, devID string, now time.Time) error {
	_, err := s.updateDevice(ctx, devID, func(d *deviceRec) error {
		if !d.Revoked {
			d.Revoked, d.RevokedAt = true, now.UTC()
		}
		return nil
	})
	return err
}

// deviceIDs lists every enrolled device's id, sorted.
func (s *store) deviceIDs(ctx context.Context) ([]string, error) {
	lister, err := s.devices.ListKeys(ctx)
	if err != nil {
		return nil, fmt.Errorf("list devices: %w", err)
	}
	defer lister.Stop()
	var ids []string
	for k := range lister.Keys() {
		ids = append(ids, k)
	}
	slices.Sort(ids)
	return slices.Compact(ids), nil
}

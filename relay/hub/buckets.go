package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// bucketSpec is one KV bucket the hub keeps. The table below is the
// hub's whole JetStream state; docs/cluster.md lists it for operators.
type bucketSpec struct {
	name, purpose string
	ttl           time.Duration // 0: kept until deleted
	history       uint8
	// share is the bucket's part of the storage budget, in MiB of the
	// default budget (sharesTotal): its MaxBytes is budget*share/sharesTotal.
	share int64
	// markerTTL is how long a delete or purge marker stays (0: until the
	// key is written again).
	markerTTL time.Duration
	field     func(*store) *jetstream.KeyValue
}

// A day outlives any enrollment window; the enroll bucket's bound keeps a
// flood of addresses from filling the disk (past it, failures count in
// memory only). Presence has no TTL: expiry would erase last_seen, so
// staleness is judged from the record's refresh time (see presenceRec).
//
// MaxBytes is a reservation: a JetStream server accepts a bucket only if
// its max_file_store has room for every replica it places there, so the
// sum over this table and the events stream is what each server of an R3
// cluster must have free (DefaultStorageBudget, 512 MiB; it was 1.3 GB,
// more than a common max_file_store of 1 GB). The shares follow what the
// data needs: a device record, token and presence record are well under
// 2 KiB together (80 MiB: ~40,000 devices), a directory entry ~300 bytes
// (80 MiB: 250,000 rooms, with their purge markers).
var buckets = []bucketSpec{
	{name: bucketDevices, purpose: "enrolled devices", history: 1, share: 80, field: func(s *store) *jetstream.KeyValue { return &s.devices }},
	{name: bucketTokens, purpose: "device token hashes", history: 1, share: 20, field: func(s *store) *jetstream.KeyValue { return &s.tokens }},
	{name: bucketPairing, purpose: "pairing code hashes", ttl: pairingRetention, history: 1, share: 12, field: func(s *store) *jetstream.KeyValue { return &s.pairing }},
	{name: bucketPresence, purpose: "device presence", history: 1, share: 20, field: func(s *store) *jetstream.KeyValue { return &s.presence }},
	{name: bucketProposals, purpose: "proposal decisions", ttl: 30 * 24 * time.Hour, history: 1, share: 64, field: func(s *store) *jetstream.KeyValue { return &s.proposals }},
	{name: bucketRooms, purpose: "room directory", history: 1, share: 80, markerTTL: dirMarkerTTL, field: func(s *store) *jetstream.KeyValue { return &s.rooms }},
	{name: bucketClients, purpose: "client (MCP) tokens", history: 1, share: 12, field: func(s *store) *jetstream.KeyValue { return &s.clients }},
	{name: bucketEnroll, purpose: "failed enrollments per address", ttl: 24 * time.Hour, history: 1, share: 6, field: func(s *store) *jetstream.KeyValue { return &s.enroll }},
	{name: bucketNodes, purpose: "hub node liveness", ttl: time.Hour, history: 1, share: 1, field: func(s *store) *jetstream.KeyValue { return &s.nodes }},
	// OAuth (relay/hub/oauth). Each record carries its own expiry; a
	// bucket's MaxAge only bounds how long an idle one is kept (a client
	// or grant in use is rewritten, which restarts its age). Their marker
	// TTL lets a record carry a shorter life of its own (a rotated refresh
	// token, a never-used registration) and makes a delete leave nothing
	// behind for 90 days.
	{name: bucketOAuthClients, markerTTL: oauthMarkerTTL, purpose: "OAuth registered clients", ttl: 90 * 24 * time.Hour, history: 1, share: 16, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Clients }},
	{name: bucketOAuthFlow, markerTTL: oauthMarkerTTL, purpose: "OAuth requests, codes and login links", ttl: 30 * time.Minute, history: 1, share: 16, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Flow }},
	{name: bucketOAuthGrants, markerTTL: oauthMarkerTTL, purpose: "OAuth grants", ttl: 90 * 24 * time.Hour, history: 1, share: 16, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Grants }},
	{name: bucketOAuthTokens, markerTTL: oauthMarkerTTL, purpose: "OAuth access and refresh token hashes", ttl: 90 * 24 * time.Hour, history: 1, share: 48, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Tokens }},
	{name: bucketOAuthApprovers, markerTTL: oauthMarkerTTL, purpose: "OAuth approvers", history: 1, share: 4, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Approvers }},
	{name: bucketOAuthSessions, markerTTL: oauthMarkerTTL, purpose: "OAuth approver browser sessions", ttl: 7 * 24 * time.Hour, history: 1, share: 4, field: func(s *store) *jetstream.KeyValue { return &s.oauth.Sessions }},
}

// oauthMarkerTTL is how long an OAuth delete marker stays (relay/hub/oauth
// jsStore purges with the same TTL).
const oauthMarkerTTL = time.Minute

// The events stream: per device and kind at most eventsPerSubject, so one
// device's events cannot evict everyone else's.
const (
	eventsMaxAge     = 7 * 24 * time.Hour
	eventsShare      = 113
	eventsPerSubject = 1000
)

// DefaultStorageBudget is what the hub reserves on each JetStream server
// for all its buckets and the events stream together (Config.StorageBudget).
const DefaultStorageBudget = 512 << 20

// MinStorageBudget is the smallest budget the hub accepts.
const MinStorageBudget = 64 << 20

// sharesTotal is the sum of the shares: the default budget in MiB.
const sharesTotal = DefaultStorageBudget >> 20

// sizeOf is a share's MaxBytes under budget (at least 1 MiB).
func sizeOf(share, budget int64) int64 { return max(1<<20, budget/sharesTotal*share) }

// errReplicas is a replica count the NATS deployment cannot place: it is
// not worth retrying unless the cluster grows.
type errReplicas struct {
	want  int
	err   error
	final bool // a non-clustered server: no retry can help
}

func (e *errReplicas) Error() string {
	return fmt.Sprintf("the NATS deployment cannot keep %d replicas (%v): it needs at least %d JetStream servers in one cluster; lower --replicas or add servers", e.want, e.err, e.want)
}
func (e *errReplicas) Unwrap() error { return e.err }

// openStore creates or updates every bucket and the events stream with
// `replicas` replicas. A bucket or stream that already has more keeps
// them: an operator's raise is never undone by a hub restart.
func openStore(ctx context.Context, js jetstream.JetStream, replicas int, budget int64, log *slog.Logger) (*store, error) {
	s := store{nc: js.Conn(), replicated: map[string]bool{}}
	for _, b := range buckets {
		r, have, err := keepReplicas(ctx, js, "KV_"+b.name, replicas, log)
		if err != nil {
			return nil, err
		}
		size := keepRoom(b.name, sizeOf(b.share, budget), have, log)
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      b.name,
			Description: "roomrelay " + b.purpose,
			History:     b.history,
			TTL:         b.ttl,
			// Every record is small; a bound per value and per bucket
			// keeps one device (or one bug) from filling the disk.
			MaxValueSize:   maxValueSize,
			MaxBytes:       size,
			LimitMarkerTTL: b.markerTTL,
			Storage:        jetstream.FileStorage,
			Replicas:       r,
		})
		if err != nil {
			return nil, replicaErr(fmt.Errorf("kv bucket %s: %w", b.name, err), r, b.name, size, budget)
		}
		*b.field(&s) = kv
		s.replicated[b.name] = r > 1
	}
	r, have, err := keepReplicas(ctx, js, streamEvents, replicas, log)
	if err != nil {
		return nil, err
	}
	size := keepRoom(streamEvents, sizeOf(eventsShare, budget), have, log)
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              streamEvents,
		Description:       "roomrelay device events",
		Subjects:          []string{subjEvents + ".>"},
		Storage:           jetstream.FileStorage,
		MaxAge:            eventsMaxAge,
		MaxBytes:          size,
		MaxMsgsPerSubject: eventsPerSubject,
		MaxMsgSize:        maxValueSize,
		Discard:           jetstream.DiscardOld,
		Replicas:          r,
	}); err != nil {
		return nil, replicaErr(fmt.Errorf("events stream: %w", err), r, streamEvents, size, budget)
	}
	return &s, nil
}

// streamSize is what an existing stream holds and its MaxBytes (both 0:
// a new one).
type streamSize struct{ used, max int64 }

// keepReplicas returns the replica count to configure a stream with: want,
// or more if the stream already has more (logged either way when they
// differ), and its size now.
func keepReplicas(ctx context.Context, js jetstream.JetStream, stream string, want int, log *slog.Logger) (int, streamSize, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, streamSize{}, nil
	}
	if err != nil {
		return 0, streamSize{}, fmt.Errorf("look up stream %s: %w", stream, err)
	}
	info := st.CachedInfo()
	sz := streamSize{used: int64(info.State.Bytes), max: info.Config.MaxBytes}
	have := info.Config.Replicas
	switch {
	case have > want:
		log.Info("keeping a stream's higher replica count", "stream", stream, "replicas", have, "asked", want)
		return have, sz, nil
	case have < want:
		log.Info("raising a stream's replica count", "stream", stream, "from", have, "to", want)
	}
	return want, sz, nil
}

// keepRoom is the MaxBytes to configure: the budget's size, or twice what
// the stream holds when that is more (a smaller budget, or an upgrade from
// the larger reservations of old, must not make a bucket refuse writes),
// but never more than the stream already had: a bucket that is full at
// its own bound stays at that bound across restarts (it doubled at each
// one: #29 "also seen"; what fills it evicts or is bounded instead).
func keepRoom(stream string, size int64, have streamSize, log *slog.Logger) int64 {
	if 2*have.used <= size {
		return size
	}
	room := 2 * have.used
	if have.max > 0 && room > have.max {
		room = max(size, have.max)
	}
	if room != size {
		log.Warn("a stream holds more than its share of the storage budget allows; keeping room for it", "stream", stream,
			"holds_bytes", have.used, "share_bytes", size, "max_bytes", room)
	}
	return room
}

// errStorage is a placement refused because the servers lack the storage
// a bucket reserves.
type errStorage struct {
	stream       string
	size, budget int64
	replicas     int
	err          error
}

func (e *errStorage) Error() string {
	return fmt.Sprintf("the NATS servers lack JetStream storage for %s, which reserves %d MiB on each of its %d replicas' servers (%v); "+
		"the hub reserves %d MiB per server in all (--storage-budget): raise max_file_store on the servers or lower --storage-budget (at least %d MiB)",
		e.stream, e.size>>20, e.replicas, e.err, e.budget>>20, MinStorageBudget>>20)
}
func (e *errStorage) Unwrap() error { return e.err }

// replicaErr turns JetStream's placement refusals into errStorage (the
// servers lack storage) or errReplicas (too few servers).
func replicaErr(err error, replicas int, stream string, size, budget int64) error {
	var apiErr *jetstream.APIError
	if errors.As(err, &apiErr) && (apiErr.ErrorCode == jsErrCodeStorageExceeded ||
		strings.Contains(apiErr.Description, "insufficient storage")) {
		return &errStorage{stream: stream, size: size, budget: budget, replicas: replicas, err: err}
	}
	if replicas > 1 && errors.As(err, &apiErr) {
		switch apiErr.ErrorCode {
		case jsErrCodeNoPeers, jsErrCodeInsufficientResources, jsErrCodeReplicasNotSupported:
			return &errReplicas{want: replicas, err: err, final: apiErr.ErrorCode == jsErrCodeReplicasNotSupported}
		}
	}
	return err
}

// JetStream API error codes nats.go does not name (nats-server's
// errors.json): 10005 no peers for placement, 10023 insufficient
// resources, 10074 replicas > 1 in non-clustered mode, 10047 insufficient
// storage resources.
const (
	jsErrCodeNoPeers               jetstream.ErrorCode = 10005
	jsErrCodeInsufficientResources jetstream.ErrorCode = 10023
	jsErrCodeReplicasNotSupported  jetstream.ErrorCode = 10074
	jsErrCodeStorageExceeded       jetstream.ErrorCode = 10047
)

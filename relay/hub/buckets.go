package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// bucketSpec is one KV bucket the hub keeps. The table below is the
// hub's whole JetStream state; docs/cluster.md lists it for operators.
type bucketSpec struct {
	name, purpose string
	ttl           time.Duration // 0: kept until deleted
	history       uint8
	maxBytes      int64
	field         func(*store) *jetstream.KeyValue
}

// A day outlives any enrollment window; the enroll bucket's bound keeps a
// flood of addresses from filling the disk (past it, failures count in
// memory only). Presence has no TTL: expiry would erase last_seen, so
// staleness is judged from the record's refresh time (see presenceRec).
var buckets = []bucketSpec{
	{bucketDevices, "enrolled devices", 0, 1, 256 << 20, func(s *store) *jetstream.KeyValue { return &s.devices }},
	{bucketTokens, "device token hashes", 0, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.tokens }},
	{bucketPairing, "pairing code hashes", pairingRetention, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.pairing }},
	{bucketPresence, "device presence", 0, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.presence }},
	{bucketProposals, "proposal decisions", 30 * 24 * time.Hour, 1, 256 << 20, func(s *store) *jetstream.KeyValue { return &s.proposals }},
	{bucketRooms, "room directory", 0, 1, 256 << 20, func(s *store) *jetstream.KeyValue { return &s.rooms }},
	{bucketClients, "client (MCP) tokens", 0, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.clients }},
	{bucketEnroll, "failed enrollments per address", 24 * time.Hour, 1, 16 << 20, func(s *store) *jetstream.KeyValue { return &s.enroll }},
	{bucketNodes, "hub node liveness", time.Hour, 1, 1 << 20, func(s *store) *jetstream.KeyValue { return &s.nodes }},
	// OAuth (relay/hub/oauth). Each record carries its own expiry; a
	// bucket's MaxAge only bounds how long an idle one is kept (a client
	// or grant in use is rewritten, which restarts its age).
	{bucketOAuthClients, "OAuth registered clients", 90 * 24 * time.Hour, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Clients }},
	{bucketOAuthFlow, "OAuth requests, codes and login links", 30 * time.Minute, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Flow }},
	{bucketOAuthGrants, "OAuth grants", 90 * 24 * time.Hour, 1, 64 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Grants }},
	{bucketOAuthTokens, "OAuth access and refresh token hashes", 90 * 24 * time.Hour, 1, 256 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Tokens }},
	{bucketOAuthApprovers, "OAuth approvers", 0, 1, 16 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Approvers }},
	{bucketOAuthSessions, "OAuth approver browser sessions", 7 * 24 * time.Hour, 1, 16 << 20, func(s *store) *jetstream.KeyValue { return &s.oauth.Sessions }},
}

// The events stream: per device and kind at most eventsPerSubject, so one
// device's events cannot evict everyone else's.
const (
	eventsMaxAge     = 7 * 24 * time.Hour
	eventsMaxBytes   = 256 << 20
	eventsPerSubject = 1000
)

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
func openStore(ctx context.Context, js jetstream.JetStream, replicas int, log *slog.Logger) (*store, error) {
	s := store{nc: js.Conn(), replicated: map[string]bool{}}
	for _, b := range buckets {
		r, err := keepReplicas(ctx, js, "KV_"+b.name, replicas, log)
		if err != nil {
			return nil, err
		}
		kv, err := js.CreateOrUpdateKeyValue(ctx, jetstream.KeyValueConfig{
			Bucket:      b.name,
			Description: "roomrelay " + b.purpose,
			History:     b.history,
			TTL:         b.ttl,
			// Every record is small; a bound per value and per bucket
			// keeps one device (or one bug) from filling the disk.
			MaxValueSize: maxValueSize,
			MaxBytes:     b.maxBytes,
			Storage:      jetstream.FileStorage,
			Replicas:     r,
		})
		if err != nil {
			return nil, replicaErr(fmt.Errorf("kv bucket %s: %w", b.name, err), r)
		}
		*b.field(&s) = kv
		s.replicated[b.name] = r > 1
	}
	r, err := keepReplicas(ctx, js, streamEvents, replicas, log)
	if err != nil {
		return nil, err
	}
	if _, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:              streamEvents,
		Description:       "roomrelay device events",
		Subjects:          []string{subjEvents + ".>"},
		Storage:           jetstream.FileStorage,
		MaxAge:            eventsMaxAge,
		MaxBytes:          eventsMaxBytes,
		MaxMsgsPerSubject: eventsPerSubject,
		MaxMsgSize:        maxValueSize,
		Discard:           jetstream.DiscardOld,
		Replicas:          r,
	}); err != nil {
		return nil, replicaErr(fmt.Errorf("events stream: %w", err), r)
	}
	return &s, nil
}

// keepReplicas returns the replica count to configure a stream with: want,
// or more if the stream already has more (logged either way when they
// differ).
func keepReplicas(ctx context.Context, js jetstream.JetStream, stream string, want int, log *slog.Logger) (int, error) {
	st, err := js.Stream(ctx, stream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return want, nil
	}
	if err != nil {
		return 0, fmt.Errorf("look up stream %s: %w", stream, err)
	}
	have := st.CachedInfo().Config.Replicas
	switch {
	case have > want:
		log.Info("keeping a stream's higher replica count", "stream", stream, "replicas", have, "asked", want)
		return have, nil
	case have < want:
		log.Info("raising a stream's replica count", "stream", stream, "from", have, "to", want)
	}
	return want, nil
}

// replicaErr turns JetStream's placement refusals into errReplicas.
func replicaErr(err error, replicas int) error {
	var apiErr *jetstream.APIError
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
// resources, 10074 replicas > 1 in non-clustered mode.
const (
	jsErrCodeNoPeers               jetstream.ErrorCode = 10005
	jsErrCodeInsufficientResources jetstream.ErrorCode = 10023
	jsErrCodeReplicasNotSupported  jetstream.ErrorCode = 10074
)

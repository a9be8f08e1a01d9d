package oauth

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// jsStore is the Store on the hub's rr_oauth_* JetStream buckets (the hub
// creates, replicates and bounds them: relay/hub/buckets.go).
type jsStore struct{ hub *hub.Hub }

// NewJetStreamStore is the Store on h's OAuth buckets. Calls before h's
// Run has set up its stores answer 503 (hub.ErrNotReady).
func NewJetStreamStore(h *hub.Hub) Store { return jsStore{hub: h} }

// markerTTL is how long a delete marker stays: the buckets' LimitMarkerTTL
// (buckets.go), so a deleted token leaves nothing for 90 days.
const markerTTL = time.Minute

func (j jsStore) kv(t Table, latest bool) (jetstream.KeyValue, error) {
	b, err := j.hub.OAuthBuckets()
	if err != nil {
		return nil, err
	}
	switch t {
	case TableClients:
		return b.Clients, nil
	case TableFlow:
		return b.Flow, nil
	case TableGrants:
		if latest {
			return b.GrantsLatest, nil
		}
		return b.Grants, nil
	case TableTokens:
		return b.Tokens, nil
	case TableApprovers:
		return b.Approvers, nil
	case TableSessions:
		return b.Sessions, nil
	}
	return nil, fmt.Errorf("oauth store: no %s", t)
}

// mapErr wraps JetStream's errors in the Store's.
func mapErr(err error) error {
	var apiErr *jetstream.APIError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, jetstream.ErrKeyNotFound), errors.Is(err, jetstream.ErrKeyDeleted):
		return fmt.Errorf("%w (%w)", ErrNotFound, err)
	case errors.Is(err, jetstream.ErrKeyExists), errors.Is(err, jetstream.ErrKeyRevisionMismatch),
		errors.As(err, &apiErr) && apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence:
		return fmt.Errorf("%w (%w)", ErrConflict, err)
	case strings.Contains(err.Error(), "maximum bytes exceeded"):
		return fmt.Errorf("%w (%w)", ErrFull, err)
	}
	return err
}

func (j jsStore) get(ctx context.Context, t Table, key string, latest bool) (Entry, error) {
	kv, err := j.kv(t, latest)
	if err != nil {
		return Entry{}, err
	}
	e, err := kv.Get(ctx, key)
	if err != nil {
		return Entry{}, mapErr(err)
	}
	return Entry{Value: e.Value(), Revision: e.Revision()}, nil
}

func (j jsStore) Get(ctx context.Context, t Table, key string) (Entry, error) {
	return j.get(ctx, t, key, false)
}

func (j jsStore) GetLatest(ctx context.Context, t Table, key string) (Entry, error) {
	return j.get(ctx, t, key, true)
}

func (j jsStore) Create(ctx context.Context, t Table, key string, value []byte, ttl time.Duration) (uint64, error) {
	kv, err := j.kv(t, false)
	if err != nil {
		return 0, err
	}
	var opts []jetstream.KVCreateOpt
	if ttl > 0 {
		opts = append(opts, jetstream.KeyTTL(max(ttl, time.Second))) // the server's smallest TTL
	}
	rev, err := kv.Create(ctx, key, value, opts...)
	return rev, mapErr(err)
}

func (j jsStore) Update(ctx context.Context, t Table, key string, value []byte, rev uint64) (uint64, error) {
	kv, err := j.kv(t, false)
	if err != nil {
		return 0, err
	}
	n, err := kv.Update(ctx, key, value, rev)
	return n, mapErr(err)
}

// Delete purges the key (its history too) and leaves a marker that
// expires after markerTTL.
func (j jsStore) Delete(ctx context.Context, t Table, key string, rev uint64) error {
	kv, err := j.kv(t, false)
	if err != nil {
		return err
	}
	opts := []jetstream.KVDeleteOpt{jetstream.PurgeTTL(markerTTL)}
	if rev > 0 {
		opts = append(opts, jetstream.LastRevision(rev))
	}
	return mapErr(kv.Purge(ctx, key, opts...))
}

func (j jsStore) Keys(ctx context.Context, t Table, prefix string) ([]string, error) {
	kv, err := j.kv(t, false)
	if err != nil {
		return nil, err
	}
	lister, err := kv.ListKeysFiltered(ctx, prefix+">")
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer lister.Stop()
	var out []string
	for k := range lister.Keys() {
		out = append(out, k)
	}
	return out, nil
}

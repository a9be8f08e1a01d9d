package hub

import (
	"bytes"
	"context"
	"errors"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
)

// TestLeaderGetAgreesWithGet: the leader read answers as a KV Get does for
// a value, an updated value, a deleted and a purged key and a key never
// written, on a real bucket.
func TestLeaderGetAgreesWithGet(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	kv, nc := th.st.proposals, th.nc
	bucket := kv.Bucket()
	check := func(key, what string) {
		t.Helper()
		want, wantErr := kv.Get(ctx, key)
		got, err := leaderGet(ctx, nc, bucket, key)
		if wantErr != nil || err != nil {
			if !errors.Is(wantErr, jetstream.ErrKeyNotFound) || !errors.Is(err, jetstream.ErrKeyNotFound) {
				t.Fatalf("%s: Get %v, leaderGet %v", what, wantErr, err)
			}
			return
		}
		if !bytes.Equal(got.Value(), want.Value()) || got.Revision() != want.Revision() || got.Key() != key ||
			got.Bucket() != bucket || !got.Created().Equal(want.Created()) || got.Operation() != jetstream.KeyValuePut {
			t.Fatalf("%s: leaderGet %q rev %d, Get %q rev %d", what, got.Value(), got.Revision(), want.Value(), want.Revision())
		}
	}
	if _, err := kv.Put(ctx, "k1", []byte(`{"v":1}`)); err != nil {
		t.Fatal(err)
	}
	check("k1", "a value")
	if _, err := kv.Put(ctx, "k1", []byte(`{"v":2}`)); err != nil {
		t.Fatal(err)
	}
	check("k1", "an updated value")
	if err := kv.Delete(ctx, "k1"); err != nil {
		t.Fatal(err)
	}
	check("k1", "a deleted key")
	if _, err := kv.Put(ctx, "k2", []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	if err := kv.Purge(ctx, "k2"); err != nil {
		t.Fatal(err)
	}
	check("k2", "a purged key")
	check("never-written", "a key never written")
	if _, err := leaderGet(ctx, nc, "rr_no_such_bucket", "k"); err == nil || errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a missing bucket reads as %v, want an error that is not 'not found'", err)
	}
}

// staleReplica answers Get with an entry the real bucket gave before the
// latest write, as a replica that has not applied that write does (the
// bucket keeps one revision, so the old one is held here).
type staleReplica struct {
	jetstream.KeyValue
	old jetstream.KeyValueEntry
}

func (s staleReplica) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	if key == s.old.Key() {
		return s.old, nil
	}
	return s.KeyValue.Get(ctx, key)
}

// TestGetLatestReadsPastAStaleReplica: in a replicated bucket whose
// answering replica lags, a read sees the old value (found, so nothing
// confirms it) and a latest() read the leader's (OAuthBuckets.GrantsLatest): what makes a grant revoked
// on one node refused on the others at once.
func TestGetLatestReadsPastAStaleReplica(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	ck := th.st.proposals.(countingKV)
	if _, err := ck.Put(ctx, "g1", []byte(`{"revoked":false}`)); err != nil {
		t.Fatal(err)
	}
	old, err := ck.Get(ctx, "g1")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := ck.Put(ctx, "g1", []byte(`{"revoked":true}`)); err != nil {
		t.Fatal(err)
	}
	type rec struct {
		Revoked bool `json:"revoked"`
	}
	lagging := countingKV{KeyValue: staleReplica{KeyValue: ck.KeyValue, old: old}, m: ck.m, bucket: ck.bucket, leader: th.nc}
	if r, _, err := getJSON[rec](ctx, lagging, "g1"); err != nil || r.Revoked {
		t.Fatalf("the premise: a lagging replica answers the old value: %+v %v", r, err)
	}
	r, _, err := getJSON[rec](ctx, latest(lagging), "g1")
	if err != nil || !r.Revoked {
		t.Fatalf("a leader read (OAuthBuckets.GrantsLatest) through a lagging replica: %+v %v, want the revoked value", r, err)
	}
	if _, _, err := getJSON[rec](ctx, latest(lagging), "never"); !errors.Is(err, jetstream.ErrKeyNotFound) {
		t.Fatalf("a missing key: %v", err)
	}
	// Not replicated (no leader to ask): the bucket's own read.
	if r, _, err := getJSON[rec](ctx, latest(ck), "g1"); err != nil || !r.Revoked {
		t.Fatalf("an unreplicated bucket: %+v %v", r, err)
	}
}

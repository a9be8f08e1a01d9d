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

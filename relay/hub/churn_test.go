package hub

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/roomrelay/roomrelay/relay"
)

// roomSet is n rooms of project p named <prefix>-<i>.
func roomSet(p, prefix string, n int) []relay.RoomEntry {
	out := make([]relay.RoomEntry, n)
	for i := range out {
		out[i] = relay.RoomEntry{Project: p, RoomID: fmt.Sprintf("%s-%d", prefix, i), Name: "room"}
	}
	return out
}

// TestDirectoryChurnIsBounded: a device renaming all its rooms again and
// again leaves at most one directory's worth of purge markers per marker
// TTL on a node (further renames are refused until the window ends), and
// each marker carries the TTL after which the server removes it.
func TestDirectoryChurnIsBounded(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	th := startHub(t, Config{Now: clock})
	dev, _ := th.enroll("p1")
	d := th.deviceRecord(dev)
	ctx := context.Background()
	n := relay.MaxDirectoryRooms
	if err := th.Hub.setDirectory(ctx, d, roomSet("p1", "a", n)); err != nil {
		t.Fatal(err)
	}
	if err := th.Hub.setDirectory(ctx, d, roomSet("p1", "b", n)); err != nil {
		t.Fatalf("the first rename of %d rooms: %v", n, err)
	}
	err := th.Hub.setDirectory(ctx, d, roomSet("p1", "c", n))
	if err == nil || !strings.Contains(err.Error(), "room directory churn bound") {
		t.Fatalf("a second rename in the window: %v, want refused", err)
	}
	if got := len(th.Hub.dir.ofDevice(dev)); got != n {
		t.Fatalf("after the refusal the device has %d entries, want its %d", got, n)
	}
	if rooms := th.Hub.dir.project("p1"); len(rooms["b-0"]) != 1 || len(rooms["c-0"]) != 0 {
		t.Fatalf("after the refusal: b-0 %v, c-0 %v; want the directory as it was", rooms["b-0"], rooms["c-0"])
	}
	// A purge marker of the first rename expires.
	msg, err := th.Hub.js.Stream(ctx, "KV_"+bucketRooms)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := msg.GetLastMsgForSubject(ctx, "$KV."+bucketRooms+"."+roomKey("p1", "a-0", dev))
	if err != nil {
		t.Fatal(err)
	}
	if op, ttl := raw.Header.Get("KV-Operation"), raw.Header.Get("Nats-TTL"); op != "PURGE" || ttl == "" {
		t.Fatalf("the purge marker: operation %q, TTL %q; want PURGE with a TTL", op, ttl)
	}
	// A window later the rename goes through.
	now.Add(int64(dirMarkerTTL))
	if err := th.Hub.setDirectory(ctx, d, roomSet("p1", "c", n)); err != nil {
		t.Fatalf("a rename a window later: %v", err)
	}
	// The hub's own drop of a revoked device is never refused.
	if err := th.Hub.dropDirectory(ctx, dev); err != nil {
		t.Fatalf("drop: %v", err)
	}
}

// TestStorageBudget: a NATS server whose max_file_store is smaller than
// the hub's budget refuses the reservations and the hub says so (not that
// it lacks servers); within the budget it starts; the reservations add up
// to the budget.
func TestStorageBudget(t *testing.T) {
	t.Parallel()
	var sum int64
	for _, b := range buckets {
		sum += sizeOf(b.share, DefaultStorageBudget)
	}
	if sum += sizeOf(eventsShare, DefaultStorageBudget); sum != DefaultStorageBudget {
		t.Fatalf("the default reservations add up to %d MiB, want %d", sum>>20, DefaultStorageBudget>>20)
	}
	ns := startNATS(t, &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, JetStreamMaxStore: 300 << 20,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	err := runErr(t, Config{NATSURL: ns.ClientURL(), Replicas: 1, StartupTimeout: 3 * time.Second, Logger: slog.New(slog.NewTextHandler(&testLogWriter{t: t}, nil))})
	if err == nil || !strings.Contains(err.Error(), "lack JetStream storage") || !strings.Contains(err.Error(), "--storage-budget") {
		t.Fatalf("a 512 MiB budget on a 300 MiB store: %v", err)
	}
	startHub(t, Config{NATSURL: ns.ClientURL(), StorageBudget: 256 << 20})
}

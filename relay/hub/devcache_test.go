package hub

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestDeviceCacheFollowsRevokeAndNewProjects: node b caches a device's
// record from its first command; enrolling the device for another project
// and revoking it, both through node a, reach b's cache through NATS. The
// TTL is an hour, so only the invalidation can make b see either change.
func TestDeviceCacheFollowsRevokeAndNewProjects(t *testing.T) {
	t.Parallel()
	url := startExternalNATS(t)
	a := startHub(t, Config{NATSURL: url, NodeName: "a", DeviceCacheTTL: time.Hour})
	b := startHub(t, Config{NATSURL: url, NodeName: "b", DeviceCacheTTL: time.Hour})
	dev, tok := a.enroll("p1")
	code := func(th *testHub, project string) relay.Code {
		res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: project, Name: relay.CmdReadRoom,
			Args: json.RawMessage(`{"room_id":"r1"}`), TimeoutMS: 2000})
		if res.Error == nil {
			t.Fatalf("command answered %+v; the device is not connected", res)
		}
		return res.Error.Code
	}
	// No agent is connected: an enrolled project reads device_offline.
	if c := code(b, "p1"); c != relay.CodeDeviceOffline {
		t.Fatalf("p1 via b: %s, want device_offline", c)
	}
	if c := code(b, "p2"); c != relay.CodeNotEnrolled {
		t.Fatalf("p2 via b before enrolling for it: %s, want not_enrolled", c)
	}

	ctx := context.Background()
	pc, err := a.cl.Pair(ctx, "p2", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.cl.Enroll(ctx, pc.Code, "test-device", "linux", tok); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node b sees the new project", func() bool { return code(b, "p2") == relay.CodeDeviceOffline })

	if _, err := a.cl.Revoke(ctx, dev); err != nil {
		t.Fatal(err)
	}
	// The revoking node forgot its entry before answering.
	if c := code(a, "p1"); c != relay.CodeNotEnrolled {
		t.Fatalf("p1 via a right after the revoke: %s, want not_enrolled", c)
	}
	waitFor(t, "node b sees the revoke", func() bool { return code(b, "p1") == relay.CodeNotEnrolled })
}

// TestDeviceCacheTTL: without any invalidation an entry is read again once
// it is older than the TTL, and a read that began before a forget does not
// store what it read.
func TestDeviceCacheTTL(t *testing.T) {
	t.Parallel()
	now := time.Unix(1_000_000, 0)
	c := newDeviceCache(5*time.Second, func() time.Time { return now })
	rec := &deviceRec{ID: "dev-1", Projects: []string{"p1"}}
	loads := 0
	load := func(context.Context, string) (*deviceRec, error) {
		loads++
		return rec, nil
	}
	ctx := context.Background()
	for range 3 {
		if _, err := c.get(ctx, "dev-1", load); err != nil {
			t.Fatal(err)
		}
	}
	if loads != 1 {
		t.Fatalf("%d loads for 3 commands within the TTL, want 1", loads)
	}
	now = now.Add(5 * time.Second)
	rec = &deviceRec{ID: "dev-1", Projects: []string{"p1"}, Revoked: true}
	if a, _ := c.get(ctx, "dev-1", load); !a.revoked || loads != 2 {
		t.Fatalf("after the TTL: revoked=%v after %d loads, want a fresh read", a.revoked, loads)
	}
	// A forget while a load is in flight: the stale read is not kept.
	stale := func(context.Context, string) (*deviceRec, error) {
		c.forget("dev-1")
		return &deviceRec{ID: "dev-1"}, nil
	}
	c.forget("dev-1")
	if _, err := c.get(ctx, "dev-1", stale); err != nil {
		t.Fatal(err)
	}
	if _, ok := c.m["dev-1"]; ok {
		t.Error("a read that raced a forget was cached")
	}
}

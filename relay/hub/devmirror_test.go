package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const connectReads = "roomrelay_hub_connect_device_reads_total"

// TestConnectReadsTheDeviceMirror: once the watch holds a device, its
// agent's connect costs no read of rr_devices; a device the mirror does not
// hold is read from the bucket and still connects.
func TestConnectReadsTheDeviceMirror(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	th.waitMetric("roomrelay_hub_mirrored_devices", "", 1)

	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	th.roundTrip(dev)
	wantSeries(t, th.scrape(), connectReads, map[string]float64{"source=bucket": 0, "source=mirror": 1})
	a.conn.Close()
	th.waitState(dev, hubapi.StateOffline)

	// As for a device enrolled a moment ago on another node, before the
	// watch delivered it. (Once the watch has delivered the first hello's
	// write, so it cannot bring the record back.)
	th.waitMirrorCaughtUp(dev)
	th.devMirror.remove(dev, 1<<62)
	b := dialAgent(t, th.wsURL(), tok, dev)
	b.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	th.roundTrip(dev)
	wantSeries(t, th.scrape(), connectReads, map[string]float64{"source=bucket": 1, "source=mirror": 1})
}

// TestRestartedHubLoadsDevicesOnDemand: a restarted hub is ready without
// reading the enrolled devices (its start costs nothing per device: #30.2;
// it used to be ready only once its mirror held them all), answers a
// device it has not loaded yet from the bucket, and keeps what it read, so
// the device's next connect reads memory.
func TestRestartedHubLoadsDevicesOnDemand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	first := startHub(t, Config{DataDir: dir})
	dev, tok := first.enroll("p1")
	first.stop()

	th := startHub(t, Config{DataDir: dir})
	if n := th.devMirror.len(); n != 0 {
		t.Fatalf("ready with %d devices loaded, want 0 (loaded on demand)", n)
	}
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	th.roundTrip(dev)
	wantSeries(t, th.scrape(), connectReads, map[string]float64{"source=bucket": 1, "source=mirror": 0})
	a.conn.Close()
	th.waitState(dev, hubapi.StateOffline)

	b := dialAgent(t, th.wsURL(), tok, dev)
	b.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	wantSeries(t, th.scrape(), connectReads, map[string]float64{"source=bucket": 1, "source=mirror": 1})
}

// TestDeviceWatchClosesRevokedSessions: a revoke whose message never
// reached this node (written straight to the bucket here) still closes the
// device's session, through the watch, and the next dial is refused from
// the mirror.
func TestDeviceWatchClosesRevokedSessions(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	th.waitMetric("roomrelay_hub_mirrored_devices", "", 1)
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	if err := th.st.revokeDevice(context.Background(), dev, time.Now()); err != nil {
		t.Fatal(err)
	}
	if code, reason := a.closeCode(); code != relay.CloseRevoked {
		t.Fatalf("socket closed with %d %q, want %d", code, reason, relay.CloseRevoked)
	}
	_, resp, err := dialRaw(th.wsURL(), tok, []string{relay.Subprotocol})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("revoked device dial: %v %v", err, resp)
	}
	wantSeries(t, th.scrape(), connectReads, map[string]float64{"source=bucket": 0, "source=mirror": 2})
}

// waitMirrorCaughtUp waits until th's mirror holds dev at the bucket's
// revision (the watch delivered every write so far).
func (th *testHub) waitMirrorCaughtUp(dev string) {
	th.t.Helper()
	waitFor(th.t, "the mirror to hold the bucket's revision", func() bool {
		_, rev, _ := th.devMirror.get(dev)
		e, err := th.st.devices.Get(context.Background(), dev)
		return err == nil && rev == e.Revision()
	})
}

// restartNATS stops ns, waits until the hubs saw it go, and starts it again
// on the same port and store; it returns once the hubs are connected again.
func restartNATS(t *testing.T, ns *server.Server, opts *server.Options, hubs ...*testHub) {
	t.Helper()
	ns.Shutdown()
	ns.WaitForShutdown()
	for _, th := range hubs {
		th.waitMetric("roomrelay_hub_nats_connected", "", 0)
	}
	startNATS(t, opts)
	for _, th := range hubs {
		th.waitMetric("roomrelay_hub_nats_connected", "", 1)
	}
}

// afterRestart retries a write for up to 20 s: JetStream may still be
// recovering its streams after a restart.
func afterRestart(t *testing.T, what string, write func() error) {
	t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		err := write()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the NATS restart: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestDeviceMirrorFollowsANATSRestart: after the NATS server restarts, the
// mirror is loaded again from a new watch (the old one would stall for tens
// of seconds) and follows the bucket: a revoke written straight to it (no
// revoke message) closes the device's session.
func TestDeviceMirrorFollowsANATSRestart(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	ns := startNATS(t, opts)
	opts.Port = ns.Addr().(*net.TCPAddr).Port
	th := startHub(t, Config{NATSURL: ns.ClientURL()})
	dev, tok := th.enroll("p1")
	th.waitMetric("roomrelay_hub_mirrored_devices", "", 1)
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	restartNATS(t, ns, opts, th)
	// A new watch, not the old one's slow recovery.
	th.waitMetric("roomrelay_hub_bucket_copy_loads_total", "bucket=rr_devices", 2)
	th.waitMetric("roomrelay_hub_mirrored_devices", "", 1)

	afterRestart(t, "revoke", func() error { return th.st.revokeDevice(context.Background(), dev, time.Now()) })
	if code, reason := a.closeCode(); code != relay.CloseRevoked {
		t.Fatalf("socket closed with %d %q, want %d", code, reason, relay.CloseRevoked)
	}
	th.stop() // while NATS is up: cleanups would stop this server first
}

// TestDirectoryFollowsANATSRestart: after the NATS server restarts, node a
// loads its room directory again from a new watch and sees what node b
// changes: a room removed and another added.
func TestDirectoryFollowsANATSRestart(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	ns := startNATS(t, opts)
	opts.Port = ns.Addr().(*net.TCPAddr).Port
	a := startHub(t, Config{NATSURL: ns.ClientURL(), NodeName: "a"})
	b := startHub(t, Config{NATSURL: ns.ClientURL(), NodeName: "b"})
	ctx := context.Background()
	dev, _ := a.enroll("p1")
	d := a.deviceRecord(dev)
	rooms := func(th *testHub) []string {
		var ids []string
		for _, r := range th.dir.room("p1", "old") {
			ids = append(ids, r.RoomID)
		}
		for _, r := range th.dir.room("p1", "new") {
			ids = append(ids, r.RoomID)
		}
		return ids
	}
	if err := b.setDirectory(ctx, d, []relay.RoomEntry{{Project: "p1", RoomID: "old", Name: "Old"}}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "node a to see the room", func() bool { return fmt.Sprint(rooms(a)) == "[old]" })

	restartNATS(t, ns, opts, a, b)
	a.waitMetric("roomrelay_hub_bucket_copy_loads_total", "bucket=rr_rooms", 2)

	afterRestart(t, "change the directory", func() error {
		return b.setDirectory(ctx, d, []relay.RoomEntry{{Project: "p1", RoomID: "new", Name: "New"}})
	})
	waitFor(t, "node a to see the change", func() bool { return fmt.Sprint(rooms(a)) == "[new]" })
	b.stop() // while NATS is up: cleanups would stop this server first
	a.stop()
}

// TestDirectoryReloadDropsWhatTheOldWatchMissed: a reload after a NATS
// reconnect replaces the copy, so an entry whose removal the stalled watch
// never delivered (put into the copy by hand here) is gone, and the rooms
// the bucket holds are kept.
func TestDirectoryReloadDropsWhatTheOldWatchMissed(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	dev, _ := th.enroll("p1")
	d := th.deviceRecord(dev)
	if err := th.setDirectory(ctx, d, []relay.RoomEntry{{Project: "p1", RoomID: "kept", Name: "Kept"}}); err != nil {
		t.Fatal(err)
	}
	th.dir.put(roomRec{Project: "p1", RoomID: "ghost", Name: "Ghost", Device: dev})
	th.natsBack.fire() // as the NATS connection does on a reconnect
	th.waitMetric("roomrelay_hub_bucket_copy_loads_total", "bucket=rr_rooms", 2)
	if g := th.dir.room("p1", "ghost"); len(g) != 0 {
		t.Errorf("the reload kept an entry the bucket does not hold: %+v", g)
	}
	if k := th.dir.room("p1", "kept"); len(k) != 1 {
		t.Errorf("the reload lost the bucket's entry: %+v", k)
	}
}

// TestRevokeMessageMarksTheMirror: the revoke message alone (its record
// never reached this node's watch, as with a stalled watch) marks the
// mirrored record revoked, so the device is refused at the door, and still
// is once this node's short memory of recent revokes has forgotten it.
func TestRevokeMessageMarksTheMirror(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	th.waitMetric("roomrelay_hub_mirrored_devices", "", 1)
	if err := th.nc.Publish(ctlSubject(dev), mustJSON(ctlMsg{Op: "revoke"})); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the revoke message to arrive", func() bool {
		d, _, _ := th.devMirror.get(dev)
		return d != nil && d.Revoked
	})
	th.mu.Lock()
	delete(th.revoked, dev) // as revokeMemory after the revoke
	th.mu.Unlock()
	_, resp, err := dialRaw(th.wsURL(), tok, []string{relay.Subprotocol})
	if err == nil || resp == nil || resp.StatusCode != http.StatusUnauthorized {
		t.Fatalf("dial after a revoke message: %v %v, want 401", err, resp)
	}
	// The record itself says revoked later; the mark stays either way.
	if err := th.st.revokeDevice(context.Background(), dev, time.Now()); err != nil {
		t.Fatal(err)
	}
	th.waitMirrorCaughtUp(dev)
	if d, _, _ := th.devMirror.get(dev); !d.Revoked || d.RevokedAt.IsZero() {
		t.Fatalf("mirrored record after the revoked one arrived: %+v", d)
	}
}

// TestDeviceMirrorOrder: only a newer revision replaces an entry, a delete
// older than the entry leaves it, a revoke is reported once, readers get
// copies, and a mirror that is not live holds nothing.
func TestDeviceMirrorOrder(t *testing.T) {
	t.Parallel()
	m := newDeviceMirror()
	rec := func(os string, revoked bool) *deviceRec {
		return &deviceRec{ID: "d1", OS: os, Revoked: revoked, Projects: []string{"p1"},
			Policy: []relay.ProjectPolicy{{Project: "p1", Commands: []string{relay.CmdReadRoom}}}}
	}
	m.put(rec("linux", false), 5)
	if _, _, ok := m.get("d1"); ok {
		t.Fatal("a mirror no watch follows answered")
	}
	m.setLive(true)
	m.put(rec("linux", false), 5)
	m.put(rec("older", false), 3)
	d, rev, ok := m.get("d1")
	if !ok || rev != 5 || d.OS != "linux" {
		t.Fatalf("after an older put: %+v rev %d %v; want linux at 5", d, rev, ok)
	}
	d.Projects[0], d.Policy[0].Commands[0] = "changed", "changed"
	if d, _, _ := m.get("d1"); d.Projects[0] != "p1" || d.Policy[0].Commands[0] != relay.CmdReadRoom {
		t.Fatalf("a reader changed the mirror: %+v", d)
	}
	m.remove("d1", 4)
	if _, _, ok := m.get("d1"); !ok {
		t.Fatal("a delete older than the entry removed it")
	}
	if !m.put(rec("linux", true), 6) {
		t.Fatal("a revoke was not reported")
	}
	if m.put(rec("linux", true), 7) {
		t.Fatal("an already revoked record was reported again")
	}
	if m.put(rec("linux", false), 8); !func() bool { d, _, _ := m.get("d1"); return d.Revoked }() {
		t.Fatal("a later record undid a revoke")
	}
	m.remove("d1", 9)
	if _, _, ok := m.get("d1"); ok {
		t.Fatal("a newer delete left the entry")
	}
	m.put(rec("linux", false), 10)
	m.markRevoked("d1")
	if d, _, _ := m.get("d1"); !d.Revoked {
		t.Fatal("markRevoked left the entry unrevoked")
	}
	m.setLive(false)
	if _, _, ok := m.get("d1"); ok || m.len() != 0 {
		t.Fatal("a mirror whose watch ended still answers")
	}
}

// TestDeviceMirrorFill: a record read from the bucket is kept only when it
// is newer than what the watch delivered and no watch began or ended since
// the read began, so a connect's read that raced a revoke cannot put the
// unrevoked record back.
func TestDeviceMirrorFill(t *testing.T) {
	t.Parallel()
	m := newDeviceMirror()
	m.setLive(true)
	rec := func(os string, revoked bool) *deviceRec {
		return &deviceRec{ID: "d1", OS: os, Revoked: revoked, Projects: []string{"p1"}}
	}
	gen := m.generation()
	m.put(rec("linux", true), 7) // the watch delivers a revoke while the read is on its way
	m.fill(rec("linux", false), 6, gen)
	if d, rev, _ := m.get("d1"); !d.Revoked || rev != 7 {
		t.Fatalf("an older read replaced the revoke: %+v at %d", d, rev)
	}

	m.setLive(true) // a new watch (after a NATS reconnect)
	m.fill(rec("linux", false), 8, gen)
	if _, _, ok := m.get("d1"); ok {
		t.Fatal("a read begun before the new watch was kept")
	}
	m.fill(rec("linux", false), 8, m.generation())
	if d, rev, ok := m.get("d1"); !ok || d.Revoked || rev != 8 {
		t.Fatalf("a current read was not kept: %+v at %d %v", d, rev, ok)
	}
	m.setLive(false)
	m.fill(rec("linux", false), 9, m.generation())
	if m.len() != 0 {
		t.Fatal("a mirror no watch follows kept a read")
	}
}

// BenchmarkDeviceMirrorMemory reports what the mirror holds per enrolled
// device (a record with one project and one command, decoded as the watch
// decodes it), the memory every node spends per device, connected or not:
//
//	go test -run '^$' -bench DeviceMirrorMemory -benchtime 1x ./relay/hub
func BenchmarkDeviceMirrorMemory(b *testing.B) {
	const n = 10_000
	now := time.Now().UTC()
	var perDevice float64
	for range b.N {
		m := newDeviceMirror()
		m.setLive(true)
		var ms runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&ms)
		before := ms.HeapAlloc
		for i := range n {
			raw := mustJSON(&deviceRec{ID: fmt.Sprintf("d-%016x", i), Name: "bench", OS: "linux", Projects: []string{"p1"},
				CreatedAt: now, TokenHash: fmt.Sprintf("%064x", i), AgentVersion: "roomrelay 0.1.0", LastSeen: now,
				Policy: []relay.ProjectPolicy{{Project: "p1", Commands: []string{relay.CmdReadRoom}}}})
			rec := new(deviceRec)
			if err := json.Unmarshal(raw, rec); err != nil {
				b.Fatal(err)
			}
			m.put(rec, uint64(i+1))
		}
		runtime.GC()
		runtime.ReadMemStats(&ms)
		perDevice = float64(ms.HeapAlloc-before) / n
		runtime.KeepAlive(m)
	}
	b.ReportMetric(perDevice, "B/device")
}

// TestRevokeWhileCutOffClosesTheSession: node a is cut off from NATS while
// node b revokes a device with a session on a, so a misses the revoke
// message and its watch delivers nothing. When a is back, the revoked
// record is among its new watch's initial values, and that closes the
// session.
func TestRevokeWhileCutOffClosesTheSession(t *testing.T) {
	t.Parallel()
	c := startCutOffPair(t)
	a, b, dev, ag := c.a, c.b, c.dev, c.agent
	a.waitMirrorCaughtUp(dev)

	// Cut off: the connection closes and redials reach nothing.
	c.cut(t)
	if _, err := b.cl.Revoke(context.Background(), dev); err != nil {
		t.Fatal(err)
	}
	select {
	case <-ag.done:
		t.Fatal("the session closed while its node was cut off from NATS: the test no longer covers a missed revoke")
	default:
	}
	c.heal()
	a.waitMetric("roomrelay_hub_bucket_copy_loads_total", "bucket=rr_devices", 2)
	if code, reason := ag.closeCode(); code != relay.CloseRevoked {
		t.Fatalf("socket closed with %d %q, want %d", code, reason, relay.CloseRevoked)
	}
	a.stop() // while NATS is up: cleanups would stop the server first
	b.stop()
}

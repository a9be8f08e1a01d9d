package hub

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// runErr runs a hub that is expected not to become ready and returns Run's
// error.
func runErr(t *testing.T, cfg Config) error {
	t.Helper()
	cfg.AdminToken = testAdmin
	h, err := New(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
		cancel()
		<-done
		t.Fatal("hub became ready; want a refusal")
	case err := <-done:
		return err
	}
	return nil
}

// TestReplicasRefused: more replicas than the deployment can keep is a
// clear error at once, not a retry until the startup deadline.
func TestReplicasRefused(t *testing.T) {
	t.Parallel()
	_, err := New(Config{AdminToken: testAdmin, DataDir: t.TempDir(), Replicas: 3})
	if err == nil || !strings.Contains(err.Error(), "embedded NATS server is a single node") {
		t.Fatalf("embedded with 3 replicas: %v", err)
	}
	url := startExternalNATS(t)
	// Replicas 0 with --nats means 3; one server cannot keep them.
	err = runErr(t, Config{NATSURL: url, StartupTimeout: 20 * time.Second})
	var re *errReplicas
	if !errors.As(err, &re) || re.want != 3 || !strings.Contains(err.Error(), "lower --replicas") {
		t.Fatalf("one server, default replicas: %v", err)
	}
}

// TestStartupWaitsForNATS: a hub started before its NATS server waits for
// it (retrying) and becomes ready once it is up; one whose NATS never comes
// gives up at --startup-timeout naming it.
func TestStartupWaitsForNATS(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := ln.Addr().(*net.TCPAddr).Port
	ln.Close()

	err = runErr(t, Config{NATSURL: "nats://" + ln.Addr().String(), Replicas: 1, StartupTimeout: 700 * time.Millisecond})
	if err == nil || !strings.Contains(err.Error(), "--startup-timeout") {
		t.Fatalf("no NATS at all: %v", err)
	}

	h, err := New(Config{NATSURL: "nats://" + ln.Addr().String(), Replicas: 1, AdminToken: testAdmin, StartupTimeout: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	select {
	case <-h.Ready():
		t.Fatal("ready without NATS")
	case err := <-done:
		t.Fatalf("Run ended without NATS: %v", err)
	case <-time.After(500 * time.Millisecond): // a few retries, no exit
	}
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: port, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true})
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	t.Cleanup(ns.Shutdown)
	select {
	case <-h.Ready():
	case err := <-done:
		t.Fatalf("Run ended after NATS came up: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("not ready 30 s after NATS came up")
	}
	// While NATS is up: the cleanups would stop the server first, and a hub
	// stopping with NATS gone waits out NATS's request timeouts (~9 s).
	stop()
}

// TestDataDirLock: a second hub on a data dir in use is refused, naming the
// first one's pid.
func TestDataDirLock(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	startHub(t, Config{DataDir: dir})
	err := runErr(t, Config{DataDir: dir})
	if err == nil || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("second hub on the data dir: %v", err)
	}
	// With --nats too (no JetStream store there, but one node name, one
	// admin token).
	url := startExternalNATS(t)
	dir = t.TempDir()
	startHub(t, Config{NATSURL: url, DataDir: dir, NodeName: "a"})
	err = runErr(t, Config{NATSURL: url, Replicas: 1, DataDir: dir, NodeName: "b"})
	if err == nil || !strings.Contains(err.Error(), "in use by pid") {
		t.Fatalf("second hub on the data dir with --nats: %v", err)
	}
}

// TestNodeNameHeldByALiveNode: a node whose name another live node beats
// under is refused, naming the rule; a name whose record nobody refreshes
// (a node that crashed) is taken after a beat and a half.
func TestNodeNameHeldByALiveNode(t *testing.T) {
	t.Parallel()
	url := startExternalNATS(t)
	beat := 100 * time.Millisecond
	a := startHub(t, Config{NATSURL: url, NodeName: "same", NodeBeat: beat})
	err := runErr(t, Config{NATSURL: url, Replicas: 1, DataDir: t.TempDir(), NodeName: "same", NodeBeat: beat})
	if err == nil || !strings.Contains(err.Error(), `node name "same" is held by a live node`) {
		t.Fatalf("a second node named same: %v", err)
	}
	// A fresh record nobody beats any more: a node that crashed a moment ago.
	rec := nodeRec{Node: "ghost", Started: time.Now().UTC(), Refreshed: time.Now().UTC(), BeatMS: beat.Milliseconds()}
	if _, err := a.Hub.st.nodes.Put(context.Background(), nodeKey("ghost"), mustJSON(rec)); err != nil {
		t.Fatal(err)
	}
	startHub(t, Config{NATSURL: url, NodeName: "ghost", NodeBeat: beat})
}

// TestEmbeddedRestartAfterCrashTakesItsName: with embedded NATS the store
// is the hub's alone, so a fresh record of its own name (left by a crash:
// here written by the previous run, with a beat of an hour) is its
// predecessor's; the restart does not wait a beat and a half of it (an
// hour and a half: startHub would give up after 30 s).
func TestEmbeddedRestartAfterCrashTakesItsName(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	a := startHub(t, Config{DataDir: dir, NodeName: "first"})
	rec := nodeRec{Node: "crashed", Started: time.Now().UTC(), Refreshed: time.Now().UTC(), BeatMS: time.Hour.Milliseconds()}
	if _, err := a.Hub.st.nodes.Put(context.Background(), nodeKey("crashed"), mustJSON(rec)); err != nil {
		t.Fatal(err)
	}
	a.stop()
	startHub(t, Config{DataDir: dir, NodeName: "crashed", NodeBeat: time.Hour})
}

// TestCrashedNodeFailsFast: node a holds the device's socket and a command
// in flight from node b; a loses NATS (as a crashed process does for the
// others). The command fails with device_offline long before its deadline,
// and node b reads the device offline, not online on a.
func TestCrashedNodeFailsFast(t *testing.T) {
	t.Parallel()
	url := startExternalNATS(t)
	a := startHub(t, Config{NATSURL: url, NodeName: "a", NodeBeat: 100 * time.Millisecond})
	b := startHub(t, Config{NATSURL: url, NodeName: "b", NodeBeat: 100 * time.Millisecond})
	dev, tok := a.enroll("p1")
	ag := dialAgent(t, a.wsURL(), tok, dev)
	got := make(chan struct{}, 1)
	ag.serve(func(*relay.Command) *relay.Result { got <- struct{}{}; return nil }) // never answers
	waitFor(t, "online on a as b sees it", func() bool { p := b.presence(dev); return p.State == hubapi.StateOnline && p.Node == "a" })

	res := make(chan *relay.Result, 1)
	go func() {
		r, _, err := b.cl.Command(context.Background(), dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom,
			Args: json.RawMessage(`{"room_id":"r"}`), TimeoutMS: 120_000})
		if err != nil {
			r = &relay.Result{Error: relay.Errorf(relay.CodeInternal, "%v", err)}
		}
		res <- r
	}()
	<-got // in flight on a
	a.Hub.nc.Close()
	select {
	case r := <-res:
		if r.Error == nil || r.Error.Code != relay.CodeDeviceOffline || !strings.Contains(r.Error.Message, "may or may not have run") {
			t.Fatalf("in-flight command after node a died: %+v", r.Error)
		}
	case <-time.After(60 * time.Second): // half its deadline: it waited for the deadline
		t.Fatal("in-flight command still waiting 60 s after node a died (deadline 120 s)")
	}
	if p := b.presence(dev); p.State != hubapi.StateOffline {
		t.Fatalf("device on the dead node reads %+v on b, want offline", p)
	}
}

// TestEnrollmentRollsBack: when the device cannot be stored, the pairing
// code is given back (not burned) and no device is left behind.
func TestEnrollmentRollsBack(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	pc, err := th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	// A token bucket that cannot take the write.
	if err := th.js.DeleteKeyValue(ctx, bucketTokens); err != nil {
		t.Fatal(err)
	}
	if _, err := th.cl.Enroll(ctx, pc.Code, "d", "linux", ""); err == nil || !strings.Contains(err.Error(), "same code") {
		t.Fatalf("enroll with no token bucket: %v", err)
	}
	code, _ := normalizeCode(pc.Code)
	pr, _, err := getJSON[pairingRec](ctx, th.st.pairing, hashSecret("pairing", code))
	if err != nil || !pr.UsedAt.IsZero() || pr.UsedBy != "" {
		t.Fatalf("pairing code after the failed enrollment: %+v, %v", pr, err)
	}
	if ids, err := th.st.deviceIDs(ctx); err != nil || len(ids) != 0 {
		t.Fatalf("devices after the failed enrollment: %v, %v", ids, err)
	}
	// Once the bucket is back, the same code enrolls.
	kv, err := th.js.CreateKeyValue(ctx, jetstream.KeyValueConfig{Bucket: bucketTokens, Storage: jetstream.FileStorage})
	if err != nil {
		t.Fatal(err)
	}
	th.st.tokens = kv
	if en, err := th.cl.Enroll(ctx, pc.Code, "d", "linux", ""); err != nil || en.DeviceID == "" {
		t.Fatalf("enroll again with the same code: %+v, %v", en, err)
	}
}

package cli

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// TestAuditVerifyComparesTheHubsAnchor: deleting the state dir once erased
// the audit history without a trace (`audit verify`: "no audit log", exit
// 0). The hub keeps the head the agent reported; `audit verify` and
// `doctor` now fail naming the gap when the local log is missing, shorter
// or forked (#24 finding 12).
func TestAuditVerifyComparesTheHubsAnchor(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	dc := srv.enroll(t, env, "p1")
	dir := filepath.Join(home, "state", daemon.AuditDir)
	writeLog := func(n int, project string) audit.Head {
		t.Helper()
		os.RemoveAll(dir)
		l, err := audit.Open(dir, audit.Options{})
		if err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if _, err := l.Append(audit.Entry{Time: time.Now(), CommandID: "c" + string(rune('a'+i)), Project: project,
				Command: relay.CmdReadRoom, Decision: audit.Allowed}); err != nil {
				t.Fatal(err)
			}
		}
		l.Close()
		h, ok, err := audit.ReadHead(dir)
		if err != nil || !ok {
			t.Fatalf("head: %v %v", ok, err)
		}
		return h
	}
	head := writeLog(5, "p1")

	// The agent's hello reports the head (a raw session with the device's token).
	cs, err := credstore.Open(context.Background(), credstore.KindFile, filepath.Join(home, "config"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.Get(context.Background(), dc.DeviceID)
	if err != nil {
		t.Fatal(err)
	}
	d := websocket.Dialer{Subprotocols: []string{relay.Subprotocol}}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(srv.URL(), "http")+relay.ConnectPath, http.Header{"Authorization": {"Bearer " + tok}})
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	b, _ := relay.Encode(&relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "test", DeviceID: dc.DeviceID, OS: "linux",
		Rooms: []relay.RoomEntry{}, AuditHead: &relay.AuditHead{Seq: head.Seq, Hash: head.Hash}})
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); err != nil { // welcome
		t.Fatal(err)
	}
	// Welcome goes out before the hub records the hello's facts: wait for
	// the anchor itself.
	hc := hubclient.New(srv.URL(), "")
	eventually(t, "the hub's anchor at the reported head", func() bool {
		h, err := hc.AuditHead(context.Background(), tok)
		return err == nil && h.Seq == head.Seq
	})

	if code, out, errs := run(t, env, "audit", "verify"); code != ExitOK || !strings.Contains(out, "audit log OK") {
		t.Fatalf("the log that reaches the anchor: %d\n%s%s", code, out, errs)
	}
	for _, c := range []struct {
		name string
		make func()
		want string
	}{
		{"deleted", func() { os.RemoveAll(filepath.Join(home, "state")) }, "the audit log is missing: the hub's anchor says it reached seq 5"},
		{"shorter", func() { writeLog(3, "p1") }, "the audit log is shorter than its anchor: it ends at seq 3, the hub's anchor is seq 5"},
		{"forked", func() { writeLog(6, "p2") }, "the audit log forked from its anchor: its line seq 5"},
	} {
		c.make()
		code, out, errs := run(t, env, "audit", "verify")
		if code != ExitFailure || !strings.Contains(out, "audit log GAP: "+c.want) {
			t.Errorf("%s: audit verify: %d\n%s%s", c.name, code, out, errs)
		}
		code, out, _ = run(t, env, "doctor", "--timeout", "5s")
		if code != ExitFailure || !strings.Contains(out, "FAIL  audit anchor") || !strings.Contains(out, c.want) {
			t.Errorf("%s: doctor: %d\n%s", c.name, code, out)
		}
	}
}

// TestAnchorCoversTheLastCommand: one command, the agent stopped at once,
// the state dir's audit log deleted: `audit verify` and `doctor` fail
// naming the gap, because the result frame carried the audit head and the
// hub recorded it before the caller had the result (#29.10). Before, the
// head went in hello and at most once a minute after: verify said "no
// audit log" and exited 0.
func TestAnchorCoversTheLastCommand(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home, env, dc, stop := srv.onlineDevice(t, "list_room_apps")
	res := srv.Command(ctx, hub.Call{Device: dc.DeviceID, Project: "p1", Name: relay.CmdListRoomApps, Args: json.RawMessage(`{"room_id":"r1"}`)})
	if !res.OK {
		t.Fatalf("command: %+v", res.Error)
	}
	stop()
	cs, err := credstore.Open(ctx, credstore.KindFile, filepath.Join(home, "config"))
	if err != nil {
		t.Fatal(err)
	}
	tok, err := cs.Get(ctx, dc.DeviceID)
	if err != nil {
		t.Fatal(err)
	}
	ah, err := hubclient.New(srv.URL(), "").AuditHead(ctx, tok)
	if err != nil {
		t.Fatal(err)
	}
	anchor := ah.Seq
	head, _, _ := audit.ReadHead(filepath.Join(home, "state", daemon.AuditDir))
	t.Logf("after one command: the local head is seq %d, the hub's anchor seq %d", head.Seq, anchor)
	if err := os.RemoveAll(filepath.Join(home, "state", daemon.AuditDir)); err != nil {
		t.Fatal(err)
	}
	want := "audit log GAP: the audit log is missing: the hub's anchor says it reached seq"
	if code, out, errs := run(t, env, "audit", "verify"); code != ExitFailure || !strings.Contains(out, want) {
		t.Errorf("audit verify after the log was deleted: %d\n%s%s", code, out, errs)
	}
	if code, out, _ := run(t, env, "doctor", "--timeout", "5s"); code != ExitFailure || !strings.Contains(out, "FAIL  audit anchor") {
		t.Errorf("doctor after the log was deleted: %d\n%s", code, out)
	}
}

package hub

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// TestAuditAnchor: the hub keeps the furthest audit head a device reported
// (hello, then audit_head events) and gives it to the device's own token
// only. It never moves back, nor to another hash at the same seq, so a
// device whose log was deleted or rewritten keeps showing the gap; a
// malformed head is ignored (#24 finding 12).
func TestAuditAnchor(t *testing.T) {
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	ctx := context.Background()
	cl := hubclient.New(th.URL(), "")
	anchor := func() (uint64, string) {
		t.Helper()
		h, err := cl.AuditHead(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if h.DeviceID != dev {
			t.Fatalf("anchor of %s, want %s", h.DeviceID, dev)
		}
		return h.Seq, h.Hash
	}
	if seq, _ := anchor(); seq != 0 {
		t.Fatalf("anchor before any report: seq %d", seq)
	}
	hash := func(c byte) string { return strings.Repeat(string(c), 64) }
	hello := helloFor(dev)
	hello.AuditHead = &relay.AuditHead{Seq: 7, Hash: hash('a')}
	a := dialAgentHello(t, th.wsURL(), tok, hello)
	// Welcome is sent before the hello's facts are recorded; presence
	// naming this session comes after them.
	sessionSetUp := func(a *fakeAgent) {
		t.Helper()
		waitFor(t, "session "+a.welcome.SessionID+" online", func() bool {
			p := th.presence(dev)
			return p.State == "online" && p.Session == a.welcome.SessionID
		})
	}
	sessionSetUp(a)
	if seq, h := anchor(); seq != 7 || h != hash('a') {
		t.Fatalf("after hello: %d %s", seq, h)
	}
	send := func(h relay.AuditHead) {
		t.Helper()
		data, _ := json.Marshal(h)
		if err := a.write(mustEncode(t, &relay.Event{Event: relay.EventAuditHead, Time: time.Now(), Data: data})); err != nil {
			t.Fatal(err)
		}
	}
	send(relay.AuditHead{Seq: 9, Hash: hash('b')})
	testutil.Eventually(t, "the event's head", func() bool { seq, _ := anchor(); return seq == 9 })
	// Backwards, a fork at the same seq, malformed: all kept out. A last
	// valid one after them shows they were processed.
	send(relay.AuditHead{Seq: 3, Hash: hash('c')})
	send(relay.AuditHead{Seq: 9, Hash: hash('d')})
	send(relay.AuditHead{Seq: 50, Hash: "not hex"})
	send(relay.AuditHead{Seq: 10, Hash: hash('e')})
	testutil.Eventually(t, "the last head", func() bool { seq, _ := anchor(); return seq == 10 })
	if _, h := anchor(); h != hash('e') {
		t.Fatalf("anchor hash %s", h)
	}
	// A new session after the log was deleted says seq 1: the anchor stays.
	a.conn.Close()
	hello.AuditHead = &relay.AuditHead{Seq: 1, Hash: hash('f')}
	sessionSetUp(dialAgentHello(t, th.wsURL(), tok, hello))
	if seq, h := anchor(); seq != 10 || h != hash('e') {
		t.Fatalf("a shorter chain's hello moved the anchor to %d %s", seq, h)
	}
	// Only the device's own token reads it.
	if _, err := cl.AuditHead(ctx, "rrd_not-a-token"); err == nil {
		t.Fatal("a bad token read the anchor")
	}
}

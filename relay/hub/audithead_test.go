package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestAuditAnchor: the hub keeps the furthest audit head a device reported
// (hello, then audit_head events) and gives it to the device's own token
// only. It never moves back, nor to another hash at the same seq, so a
// device whose log was deleted or rewritten keeps showing the gap; a
// malformed head is ignored (#24 finding 12).
func TestAuditAnchor(t *testing.T) {
	t.Parallel()
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

// TestResultMovesTheAnchor: a result frame's audit head is in the device
// record before the caller has the result, so the anchor is never behind
// a command the cloud has seen (#29.10; before, only hello and a
// once-a-minute event moved it: the anchor read 0 here). It never moves
// back, nor to another hash at the same seq, and the caller's result does
// not carry the device's bookkeeping.
func TestResultMovesTheAnchor(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	ctx := context.Background()
	cl := hubclient.New(th.URL(), "")
	hash := func(c byte) string { return strings.Repeat(string(c), 64) }
	var next relay.AuditHead
	var mu sync.Mutex
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(func(c *relay.Command) *relay.Result {
		res := echoHandler(c)
		mu.Lock()
		h := next
		mu.Unlock()
		res.AuditHead = &h
		return res
	})
	th.waitState(dev, "online")
	for i, c := range []struct {
		sent     relay.AuditHead
		wantSeq  uint64
		wantHash string
	}{
		{relay.AuditHead{Seq: 1, Hash: hash('a')}, 1, hash('a')},
		{relay.AuditHead{Seq: 4, Hash: hash('b')}, 4, hash('b')},
		{relay.AuditHead{Seq: 2, Hash: hash('c')}, 4, hash('b')}, // back: stays
		{relay.AuditHead{Seq: 4, Hash: hash('d')}, 4, hash('b')}, // a fork at the same seq: stays
		{relay.AuditHead{Seq: 9, Hash: "nothex"}, 4, hash('b')},  // malformed: ignored
		{relay.AuditHead{Seq: 5, Hash: hash('e')}, 5, hash('e')},
	} {
		mu.Lock()
		next = c.sent
		mu.Unlock()
		res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"r1"}`)})
		if status != http.StatusOK || !res.OK {
			t.Fatalf("%d: command: %d %+v", i, status, res)
		}
		if res.AuditHead != nil {
			t.Errorf("%d: the caller's result carries the device's audit head %+v", i, res.AuditHead)
		}
		// No waiting: the result came back, so the anchor is there.
		h, err := cl.AuditHead(ctx, tok)
		if err != nil {
			t.Fatal(err)
		}
		if h.Seq != c.wantSeq || h.Hash != c.wantHash {
			t.Fatalf("%d: after a result with %d/%.8s the anchor is %d/%.8s, want %d/%.8s", i, c.sent.Seq, c.sent.Hash, h.Seq, h.Hash, c.wantSeq, c.wantHash)
		}
	}
}

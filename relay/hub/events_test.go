package hub

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestEventsAreBounded: what one device can make the hub store through
// events is bounded: oversized events and unknown kinds are not stored,
// decisions only for proposals the hub routed, a hello's text and policy
// are cleaned, and a flood of events is dropped, not answered by closing.
func TestEventsAreBounded(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()
	dev, tok := th.enroll("p1")
	hello := helloFor(dev)
	hello.OS = "linux\x1b[2J" + strings.Repeat("x", 5000)
	hello.AgentVersion = "1.0\r\nFAKE dev-xxxx online"
	hello.Policy = []relay.ProjectPolicy{{Project: "p1", Commands: []string{relay.CmdReadRoom, "rm_rf"}}, {Project: "p-not-enrolled", Commands: []string{relay.CmdReadRoom}}}
	a := dialAgentHello(t, th.wsURL(), tok, hello)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	d, err := th.Device(ctx, dev)
	if err != nil {
		t.Fatal(err)
	}
	if len(d.OS) > maxOS || strings.ContainsAny(d.OS+d.AgentVersion, "\x1b\r\n") {
		t.Errorf("hello text stored as %q / %q", d.OS, d.AgentVersion)
	}
	if len(d.Policy) != 1 || d.Policy[0].Project != "p1" || len(d.Policy[0].Commands) != 1 {
		t.Errorf("hello policy stored as %+v", d.Policy)
	}

	stream, err := th.js.Stream(ctx, streamEvents)
	if err != nil {
		t.Fatal(err)
	}
	count := func() uint64 {
		info, err := stream.Info(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return info.State.Msgs
	}
	send := func(ev *relay.Event) {
		t.Helper()
		if err := a.write(mustEncode(t, ev)); err != nil {
			t.Fatal(err)
		}
	}
	before := count()
	big, _ := json.Marshal(map[string]string{"proposal_id": "p", "pad": strings.Repeat("x", MaxEventData)})
	send(&relay.Event{Event: relay.EventPolicyChanged, Time: time.Now(), Data: big})
	send(&relay.Event{Event: "invented_kind", Time: time.Now(), Data: json.RawMessage(`{"a":1}`)})
	send(&relay.Event{Event: relay.EventProposalDecided, Time: time.Now(), Data: json.RawMessage(`{"proposal_id":"made-up-1"}`)})
	send(&relay.Event{Event: relay.EventSleeping, Time: time.Now()}) // stored: the marker that the others were handled
	// The hub publishes in the order it read, so once sleeping is stored,
	// every stored event sent before it is too.
	waitFor(t, "the sleeping event stored", func() bool {
		_, err := stream.GetLastMsgForSubject(ctx, eventSubject(dev, relay.EventSleeping))
		return err == nil
	})
	if n := count() - before; n != 2 { // the decision on a made-up id is published but not recorded
		t.Errorf("%d events stored, want 2 (the unrouted decision and sleeping)", n)
	}
	if _, err := th.st.proposals.Get(ctx, proposalKey(dev, "made-up-1")); err != jetstream.ErrKeyNotFound {
		t.Errorf("a decision on an id the hub never routed was recorded: %v", err)
	}

	// A flood past the budget no longer closes the session (#29.6: that
	// took a churning device offline; the assertion was a 1008 close): an
	// event the hub does not use is dropped past it, and the session
	// serves on. TestEventChurnKeepsTheSession covers the state events.
	for range eventBurst + 10 {
		send(&relay.Event{Event: "invented_kind", Time: time.Now(), Data: json.RawMessage(`{"a":1}`)})
	}
	th.roundTrip(dev)
	select {
	case <-a.done:
		code, reason := a.closeCode()
		t.Errorf("a flood closed the session: %d %s", code, reason)
	default:
	}
}

// TestOversizedCommandIsRefused: a command whose body fits the hub's limit
// but whose frame would not fit the agent's is invalid_args at the hub,
// and the agent keeps its socket.
func TestOversizedCommandIsRefused(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{MaxFrame: 4096})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.conn.SetReadLimit(4096)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	args := json.RawMessage(`{"room_id":"r","pad":"` + strings.Repeat("x", 3950) + `"}`)
	res, status := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: args})
	if status != 400 || res.Error == nil || res.Error.Code != relay.CodeInvalidArgs || !strings.Contains(res.Error.Message, "max frame") {
		t.Fatalf("oversized frame: %d %+v", status, res.Error)
	}
	th.roundTrip(dev) // the agent is still connected
}

// TestEnrollAttemptsAreReservedFirst: 200 concurrent wrong codes from one
// address: at most the allowed failures are evaluated, the rest are
// rate_limited, and a valid code from another address still works.
func TestEnrollAttemptsAreReservedFirst(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{EnrollFailures: 10})
	ctx := context.Background()
	var mu sync.Mutex
	evaluated, limited := 0, 0
	var wg sync.WaitGroup
	for range 200 {
		wg.Go(func() {
			_, err := th.Enroll(ctx, hubapi.EnrollRequest{Code: "ZZZZ-ZZZZ"}, "", "192.0.2.7")
			var he *Error
			if !errors.As(err, &he) {
				t.Errorf("enroll: %v", err)
				return
			}
			mu.Lock()
			defer mu.Unlock()
			if he.Code == "rate_limited" {
				limited++
			} else {
				evaluated++
			}
		})
	}
	wg.Wait()
	if evaluated > 10 || limited != 200-evaluated {
		t.Errorf("%d evaluated, %d rate_limited; want at most 10 evaluated", evaluated, limited)
	}
	pc, err := th.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.Enroll(ctx, hubapi.EnrollRequest{Code: pc.Code}, "", "192.0.2.8"); err != nil {
		t.Fatalf("a valid code from another address: %v", err)
	}
}

// TestEnrollFailuresOutliveARestartAndCrossNodes: failed enrollments are
// counted in NATS, so a hub restart does not forget them and another hub
// node on the same NATS sees them too.
func TestEnrollFailuresOutliveARestartAndCrossNodes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const addr = "192.0.2.9"
	guess := func(th *testHub, n int) {
		t.Helper()
		for i := range n {
			if _, err := th.Enroll(ctx, hubapi.EnrollRequest{Code: "ZZZZ-ZZZZ"}, "", addr); err == nil || strings.Contains(err.Error(), "rate_limited") {
				t.Fatalf("guess %d: %v", i, err)
			}
		}
	}
	blocked := func(th *testHub) bool {
		_, err := th.Enroll(ctx, hubapi.EnrollRequest{Code: "ZZZZ-ZZZZ"}, "", addr)
		return err != nil && strings.Contains(err.Error(), "rate_limited")
	}

	dir := t.TempDir()
	th := startHub(t, Config{DataDir: dir, EnrollFailures: 3})
	guess(th, 3)
	th.stop()
	th2 := startHub(t, Config{DataDir: dir, EnrollFailures: 3})
	if !blocked(th2) {
		t.Error("a restarted hub forgot the failures")
	}

	url := startExternalNATS(t)
	a := startHub(t, Config{NATSURL: url, NodeName: "a", EnrollFailures: 3})
	b := startHub(t, Config{NATSURL: url, NodeName: "b", EnrollFailures: 3})
	guess(a, 3)
	if !blocked(b) {
		t.Error("node b does not see node a's failures")
	}
}

// TestReadyz: /v1/readyz is 200 while NATS is connected and a KV write and
// read succeed, and 503 with the reason when the NATS server goes away,
// while /v1/healthz (liveness) stays 200; 200 again once NATS is back.
// The hub stops while NATS is up (a hub stopping with NATS gone waits out
// NATS's own request timeouts, ~9 s, which this test is not about).
func TestReadyz(t *testing.T) {
	t.Parallel()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoSigs: true, NoLog: true}
	ns := startNATS(t, opts)
	opts.Port = ns.Addr().(*net.TCPAddr).Port
	th := startHub(t, Config{NATSURL: ns.ClientURL()})
	get := func(path string) (int, string) {
		resp, err := http.Get(th.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/v1/readyz"); code != 200 || !strings.Contains(body, `"ready"`) {
		t.Fatalf("readyz with NATS up: %d %s", code, body)
	}
	ns.Shutdown()
	ns.WaitForShutdown()
	waitFor(t, "readyz 503", func() bool {
		code, body := get("/v1/readyz")
		return code == 503 && strings.Contains(body, "NATS is")
	})
	if code, _ := get("/v1/healthz"); code != 200 {
		t.Errorf("healthz with NATS down: %d", code)
	}
	startNATS(t, opts) // same port and store
	waitFor(t, "readyz 200 with NATS back", func() bool {
		code, body := get("/v1/readyz")
		return code == 200 && strings.Contains(body, `"ready"`)
	})
	th.stop() // while NATS is up: cleanups would stop this server first
}

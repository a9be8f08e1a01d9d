package e2e

import (
	"context"
	"encoding/json"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestDrainIsMakeBeforeBreak: a real agent behind a load balancer (a TCP
// proxy) on node a; the balancer takes a out of rotation and a shuts down
// gracefully while a caller on node b keeps sending commands. The agent
// opens its new session on b before it leaves a, so no command fails with
// device_offline, and the device ends online on b.
func TestDrainIsMakeBeforeBreak(t *testing.T) {
	url := externalNATS(t)
	// A spread long enough for commands to arrive during the handover, and
	// a grace long enough that node a never has to cut the old session.
	cfg := func(node string) hub.Config {
		return hub.Config{NATSURL: url, NodeName: node, DrainSpread: 300 * time.Millisecond, DrainGrace: 10 * time.Second}
	}
	a := startHub(t, cfg("a"))
	b := startHub(t, cfg("b"))
	lb := testutil.NewProxy(t, strings.TrimPrefix(a.URL(), "http://"))

	dv := enroll(t, a, "proj-a")
	dv.enable(t, "proj-a")
	// The callers below are faster than the default device rate.
	pol, err := os.ReadFile(dv.policyPath())
	if err != nil {
		t.Fatal(err)
	}
	pol = []byte(strings.Replace(string(pol), "rate     "+allowlist.DefaultRate.String(), "rate 60000/min burst 1000", 1))
	if err := os.WriteFile(dv.policyPath(), pol, 0o600); err != nil {
		t.Fatal(err)
	}
	dv.start(t, "http://"+lb.Addr())
	seedRoom(t, dv, "proj-a", "room-1")
	eventually(t, "online on a", func() bool {
		d, err := b.client.Device(context.Background(), dv.id)
		return err == nil && d.Presence.State == hubapi.StateOnline && d.Presence.Node == "a"
	})

	var (
		mu      sync.Mutex
		results []*relay.Result
	)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				raw, _ := json.Marshal(map[string]string{"room_id": "room-1"})
				res, _, err := b.client.Command(context.Background(), dv.id, hubapi.CommandRequest{ProjectID: "proj-a", Name: relay.CmdReadRoom, Args: raw, TimeoutMS: 10000})
				if err != nil {
					t.Errorf("command: %v", err)
					return
				}
				mu.Lock()
				results = append(results, res)
				mu.Unlock()
			}
		})
	}
	count := func() int { mu.Lock(); defer mu.Unlock(); return len(results) }
	// Commands flow before the drain starts and go on after it ended, so
	// the whole handover happens under load however fast or slow it is.
	eventually(t, "commands flowing before the drain", func() bool { return count() >= 5 })
	lb.SetTarget(strings.TrimPrefix(b.URL(), "http://")) // a leaves the rotation
	a.stop(t)                                            // drains: returns once the agent left
	eventually(t, "online on b", func() bool {
		d, err := b.client.Device(context.Background(), dv.id)
		return err == nil && d.Presence.State == hubapi.StateOnline && d.Presence.Node == "b"
	})
	after := count()
	eventually(t, "commands flowing after the drain", func() bool { return count() >= after+5 })
	close(stop)
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	if len(results) < 10 {
		t.Fatalf("only %d commands ran during the drain", len(results))
	}
	for _, r := range results {
		if !r.OK {
			t.Fatalf("a command failed during the drain (of %d): %s: %s", len(results), r.Error.Code, r.Error.Message)
		}
	}
	t.Logf("%d commands during the drain, all answered", len(results))
}

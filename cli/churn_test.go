package cli

import (
	"bufio"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
)

// TestLocalChurnKeepsTheDeviceOnline: a real agent and a real hub; policy
// edits through the local API as fast as they go, for a bounded time and
// count. Every cloud read in that time is answered, what the agent sends
// is bounded by design (it coalesces state events and paces each kind:
// agent.StatePace), the hub never has to hold events back, and it ends on
// the device's last policy (#29.6). Before, ~1,000 edits in 8 s made the
// hub close the session 5-6 times and reads failed device_offline; with
// the hub's side alone, the agent still sent every policy_changed.
func TestLocalChurnKeepsTheDeviceOnline(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home, _, dc, _ := srv.onlineDevice(t, "list_room_apps")
	c, _, err := localapi.Discover(ctx, filepath.Join(home, "config"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()

	const maxEdits, maxChurn = 1000, 8 * time.Second // bounded in count and time
	type churned struct {
		edits      int
		allowsRead bool // what the last edit left
		err        error
	}
	done := make(chan churned, 1)
	start := time.Now()
	go func() {
		var r churned
		for r.edits < maxEdits && time.Since(start) < maxChurn {
			req := allowlist.EnableRequest{Allow: []string{relay.CmdReadRoom}}
			if r.edits%2 == 1 {
				req = allowlist.EnableRequest{Deny: []string{relay.CmdReadRoom}}
			}
			if _, err := c.Do(ctx, "POST", "projects/p1/enable", req, nil, nil); err != nil {
				r.err = err
				break
			}
			r.allowsRead = r.edits%2 == 0
			r.edits++
		}
		done <- r
	}()
	reads, failed := 0, 0
	var r churned
	for churning := true; churning; {
		select {
		case r = <-done:
			churning = false
		case <-time.After(250 * time.Millisecond): // within the device's read rate (120/min, burst 30)
			res := srv.Command(ctx, hub.Call{Device: dc.DeviceID, Project: "p1", Name: relay.CmdListRoomApps, Args: []byte(`{"room_id":"r1"}`)})
			reads++
			if !res.OK {
				failed++
				if failed <= 3 {
					t.Logf("cloud read %d during the churn: %v", reads, res.Error)
				}
			}
		}
	}
	churn := time.Since(start)
	if r.err != nil {
		t.Fatalf("policy edit %d: %v", r.edits, r.err)
	}
	hubAllowsRead := func() bool {
		d, err := srv.Device(ctx, dc.DeviceID)
		if err != nil || len(d.Policy) != 1 {
			return false
		}
		return slices.Contains(d.Policy[0].Commands, relay.CmdReadRoom)
	}
	eventually(t, "the hub on the last policy", func() bool { return hubAllowsRead() == r.allowsRead })
	settled := time.Since(start)
	// Still there a pace later: no older policy arrived after the last.
	time.Sleep(agent.StatePace + time.Second)
	if hubAllowsRead() != r.allowsRead {
		t.Errorf("a pace later the hub's policy allows read_room %v, the device's %v", !r.allowsRead, r.allowsRead)
	}

	policyEvents := hubEvents(t, srv, relay.EventPolicyChanged, "")
	waited := hubEvents(t, srv, "", "waited") + hubEvents(t, srv, "", "replaced") + hubEvents(t, srv, "", "slowed")
	t.Logf("%d policy edits in %v; cloud reads: %d answered, %d failed; the hub got %.0f policy_changed events (held back %.0f of all kinds) and had the last policy %v after the start",
		r.edits, churn.Round(time.Millisecond), reads-failed, failed, policyEvents, waited, settled.Round(time.Millisecond))
	if failed > 0 {
		t.Errorf("%d of %d cloud reads failed during the churn", failed, reads)
	}
	if limit := churn.Seconds()/agent.StatePace.Seconds() + 3; policyEvents > limit {
		t.Errorf("the hub got %.0f policy_changed events in %v, want at most %.0f (one per %v)", policyEvents, churn, limit, agent.StatePace)
	}
	if waited > 0 {
		t.Errorf("the hub held back %.0f events: the agent sent past its budget", waited)
	}
}

// hubEvents sums roomrelay_hub_events_total over the series with this kind
// and handling ("" matches any).
func hubEvents(t *testing.T, srv *testHub, kind, handling string) float64 {
	t.Helper()
	rec := httptest.NewRecorder()
	srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	sum := 0.0
	sc := bufio.NewScanner(rec.Body)
	for sc.Scan() {
		ln := sc.Text()
		if !strings.HasPrefix(ln, "roomrelay_hub_events_total{") ||
			(kind != "" && !strings.Contains(ln, `kind="`+kind+`"`)) ||
			(handling != "" && !strings.Contains(ln, `handling="`+handling+`"`)) {
			continue
		}
		v, err := strconv.ParseFloat(ln[strings.LastIndexByte(ln, ' ')+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", ln, err)
		}
		sum += v
	}
	return sum
}

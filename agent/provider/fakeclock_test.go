package provider

import (
	"context"
	"encoding/json"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestInstallBackoffSchedule (#28 §1.2): an app that fails every install
// gets it once, then after 1 s, 2 s, 4 s, … at most 5 min, although the
// store watch kicks the installer on every attempt (each attempt writes the
// store, as in the daemon); only the app's next hello delivers at once. On
// the bubble's fake clock, over an in-memory socket to the real server and a
// real websocket client.
func TestInstallBackoffSchedule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		st, _ := approvedStore(t, t.TempDir(), "r1")
		ts := startPipeServer(t, nil)
		inst := NewInstaller(st, ts.Server, nil, nil)
		var mu sync.Mutex
		var at []time.Duration
		var start time.Time
		answer := func(_ *fakeApp, m message) string {
			if m.Method != MethodAppsInstall {
				return `"error":{"code":-32601,"message":"no"}`
			}
			mu.Lock()
			at = append(at, time.Since(start))
			n := len(at)
			mu.Unlock()
			// The daemon's store watch: the attempt changed the store. (Not
			// after 100 deliveries: an installer that retries on each kick
			// would never let the fake clock move.)
			if n <= 100 {
				inst.Kick()
			}
			return `"error":{"code":-32000,"message":"disk full","data":{"code":"internal"}}`
		}
		connectApp(t, ts, allCaps, answer)
		start = time.Now()
		runInstaller(t, inst)
		time.Sleep(20 * time.Minute)
		synctest.Wait()
		var want []time.Duration
		for d, next := time.Duration(0), time.Second; d <= 20*time.Minute; d, next = d+next, min(2*next, 5*time.Minute) {
			want = append(want, d)
		}
		mu.Lock()
		got := slices.Clone(at)
		mu.Unlock()
		if !slices.Equal(got, want) {
			t.Fatalf("deliveries at %v, want %v (1 s doubling to 5 min)", got, want)
		}
		// The app's next hello: at once, then the schedule starts over.
		connectApp(t, ts, allCaps, answer)
		reconnect := time.Since(start)
		inst.Kick() // the daemon kicks on each hello
		time.Sleep(3*time.Second + time.Second/2)
		synctest.Wait()
		mu.Lock()
		got = slices.Clone(at[len(want):])
		mu.Unlock()
		if want := []time.Duration{reconnect, reconnect + time.Second, reconnect + 3*time.Second}; !slices.Equal(got, want) {
			t.Fatalf("after the next hello deliveries at %v, want %v", got, want)
		}
	})
}

// TestInstallsInParallelByRoom (#28 §2): an app that holds one install does
// not hold the others back: up to MaxInFlight are in flight at once, one per
// room, and a room's installs come in approval order.
func TestInstallsInParallelByRoom(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// a1 and a2 in room a; b1, c1, d1 in rooms b, c, d.
		st, props := approvedStore(t, t.TempDir(), "a", "b", "a", "c", "d")
		ts := startPipeServer(t, nil)
		inst := NewInstaller(st, ts.Server, nil, nil)
		inst.MaxInFlight = 3
		var mu sync.Mutex
		var held []message // requests not answered yet
		var order []string // proposal ids in delivery order
		app := connectApp(t, ts, allCaps, func(_ *fakeApp, m message) string {
			if m.Method != MethodAppsInstall {
				return `"error":{"code":-32601,"message":"no"}`
			}
			var p struct {
				ProposalID string `json:"proposal_id"`
			}
			_ = json.Unmarshal(m.Params, &p)
			mu.Lock()
			held = append(held, m)
			order = append(order, p.ProposalID)
			mu.Unlock()
			return ""
		})
		runInstaller(t, inst)
		synctest.Wait()
		// ids is the delivery order, the first n sorted (delivered at once:
		// their order across rooms is the scheduler's).
		ids := func(n int) []string {
			mu.Lock()
			defer mu.Unlock()
			out := slices.Clone(order)
			slices.Sort(out[:min(n, len(out))])
			return out
		}
		sorted := func(s ...string) []string { slices.Sort(s); return s }
		// In flight: a1, b1, c1 (the bound is 3; a2 waits behind a1).
		if got, want := ids(3), sorted(props[0].ID, props[1].ID, props[3].ID); !slices.Equal(got, want) {
			t.Fatalf("delivered %v, want a1 b1 c1 %v", got, want)
		}
		answerHeld := func(id string) {
			mu.Lock()
			m := held[slices.Index(order, id)]
			mu.Unlock()
			var p struct {
				InstanceID string `json:"instance_id"`
			}
			_ = json.Unmarshal(m.Params, &p)
			app.send(`{"jsonrpc":"2.0","id":` + string(m.ID) + `,"result":{"instance_id":"` + p.InstanceID + `"}}`)
			synctest.Wait()
		}
		answerHeld(props[1].ID) // b1 done: d1 goes, a2 still waits behind a1
		if got, want := ids(3), append(sorted(props[0].ID, props[1].ID, props[3].ID), props[4].ID); !slices.Equal(got, want) {
			t.Fatalf("delivered %v, want d1 next (a2 waits for a1)", got)
		}
		answerHeld(props[0].ID) // a1 done: a2 goes
		if got := ids(3); len(got) != 5 || got[4] != props[2].ID {
			t.Fatalf("delivered %v, want a2 last", got)
		}
	})
}

// TestUnansweredReadAtTheDeadline (#28 §1.7): a rooms.read the app never
// answers, under the cloud's default command deadline (30 s), is cancelled
// with $/cancelRequest at exactly 30 s, and the caller's error is expired in
// roomrelay's words: no Go error text ("context deadline exceeded") for the
// cloud to see.
func TestUnansweredReadAtTheDeadline(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startPipeServer(t, nil)
		var mu sync.Mutex
		cancelAt := time.Duration(-1)
		var start time.Time
		app := connectApp(t, ts, allCaps, func(*fakeApp, message) string { return "" }) // never answers
		go func() {
			for {
				if len(app.received(MethodCancel)) > 0 {
					mu.Lock()
					cancelAt = time.Since(start)
					mu.Unlock()
					return
				}
				time.Sleep(time.Millisecond)
			}
		}()
		start = time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), hubapi.DefaultCommandTimeout)
		defer cancel()
		_, err := ts.App().ReadRoom(ctx, "p1", "r1")
		failedAt := time.Since(start)
		synctest.Wait()
		time.Sleep(10 * time.Millisecond)
		re := relay.AsError(err)
		if re.Code != relay.CodeExpired || strings.Contains(re.Message, "context") || !strings.Contains(re.Message, "did not answer rooms.read before the command's deadline") {
			t.Fatalf("error %q, want expired in roomrelay's words", err)
		}
		mu.Lock()
		defer mu.Unlock()
		if failedAt != 30*time.Second || cancelAt < 30*time.Second || cancelAt > 30*time.Second+2*time.Millisecond {
			t.Fatalf("failed at %v, $/cancelRequest at %v; want both at 30 s", failedAt, cancelAt)
		}
	})
}

// TestSetBuildStateIsBounded: after an approval's smoke-run the daemon tells
// the app with a context that has no deadline; an app that never answers
// gets $/cancelRequest after BuildStateTimeout and the call ends (it held a
// request slot for ever before).
func TestSetBuildStateIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ts := startPipeServer(t, nil)
		app := connectApp(t, ts, allCaps, func(*fakeApp, message) string { return "" }) // never answers
		start := time.Now()
		errc := make(chan error, 1)
		go func() {
			errc <- ts.App().SetBuildState(context.Background(), "p1", "r1", "a1", strings.Repeat("0", 64), rooms.Build{State: rooms.BuildOK})
		}()
		var err error
		select {
		case err = <-errc:
		case <-time.After(time.Hour):
			t.Fatal("apps.set_build_state still waits after an hour")
		}
		if took := time.Since(start); relay.AsError(err).Code != relay.CodeExpired || took != BuildStateTimeout {
			t.Fatalf("err %v after %v, want expired after %v", err, took, BuildStateTimeout)
		}
		synctest.Wait()
		testutil.Eventually(t, "$/cancelRequest", func() bool { return len(app.received(MethodCancel)) == 1 })
	})
}

package hub

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestEventChurnKeepsTheSession: a device that sends state-like events far
// past the event budget (a directory and a policy re-sent in a loop, as a
// churning provider or an old agent would) keeps its session: every command
// during the churn is answered, and the hub ends on the last directory and
// policy sent, none lost behind superseded ones (#29.6). Before, the hub
// closed the session at the 1,001st event ("more than 120 events a
// minute") and the commands after it failed device_offline.
func TestEventChurnKeepsTheSession(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	session := th.presence(dev).Session

	const events = 3 * eventBurst // bounded in count; 3x the burst
	policies := [][]string{{relay.CmdReadRoom}, {relay.CmdReadRoom, relay.CmdListRoomApps}}
	lastPolicy := []string{relay.CmdListRoomApps}
	event := func(i int) *relay.Event {
		if i%2 == 0 {
			cmds := policies[i/2%2]
			if i >= events-2 {
				cmds = lastPolicy
			}
			data, _ := json.Marshal(relay.PolicyChanged{Policy: []relay.ProjectPolicy{{Project: "p1", Commands: cmds}}})
			return &relay.Event{Event: relay.EventPolicyChanged, Time: time.Now(), Data: data}
		}
		// Renames: the directory churn bound counts removals, not this.
		rooms := []relay.RoomEntry{{Project: "p1", RoomID: "r1", Name: fmt.Sprintf("churn %d", i)}}
		data, _ := json.Marshal(relay.RoomsChanged{Rooms: rooms})
		return &relay.Event{Event: relay.EventRoomsChanged, Time: time.Now(), Data: data}
	}
	lastName := fmt.Sprintf("churn %d", events-1)

	sent := make(chan error, 1)
	start := time.Now()
	go func() {
		for i := range events {
			if err := a.write(mustEncode(t, event(i))); err != nil {
				sent <- fmt.Errorf("event %d: %w", i, err)
				return
			}
		}
		sent <- nil
	}()
	atLast := func() bool {
		d := th.deviceRecord(dev)
		if len(d.Policy) != 1 || !slices.Equal(d.Policy[0].Commands, lastPolicy) {
			return false
		}
		rooms, err := th.Rooms(context.Background(), "p1")
		return err == nil && len(rooms) == 1 && rooms[0].Name == lastName
	}
	// Commands while the hub works through the churn, until it ends on the
	// last state; bounded in count.
	ok, failed := 0, 0
	var sendErr error
	var sentIn time.Duration
	for i := 0; i < 1000; i++ {
		res, status, err := th.cl.Command(context.Background(), dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"r1"}`)})
		if err != nil || status != http.StatusOK || !res.OK {
			failed++
			if failed <= 3 {
				t.Logf("command %d during the churn: %d %+v %v", i, status, res, err)
			}
		} else {
			ok++
		}
		if sentIn == 0 {
			select {
			case sendErr = <-sent:
				sentIn = time.Since(start)
			default:
			}
		}
		if sentIn != 0 && atLast() {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if sentIn == 0 {
		sendErr = <-sent
		sentIn = time.Since(start)
	}
	if sendErr != nil {
		t.Errorf("the hub stopped reading the churn: %v", sendErr)
	}
	waitFor(t, "the last policy and directory at the hub", atLast)
	t.Logf("%d events sent in %v; the last state at the hub after %v; commands during the churn: %d answered, %d failed",
		events, sentIn.Round(time.Millisecond), time.Since(start).Round(time.Millisecond), ok, failed)
	if failed > 0 {
		t.Errorf("%d of %d commands failed during the churn", failed, ok+failed)
	}
	if p := th.presence(dev); p.State != hubapi.StateOnline || p.Session != session {
		t.Errorf("after the churn the device is %s in session %s, want online in %s", p.State, p.Session, session)
	}
	select {
	case <-a.done:
		code, reason := a.closeCode()
		t.Errorf("the hub closed the session: %d %s", code, reason)
	default:
	}
}

// TestRefusedDirectoryIsAppliedLater: a directory the churn bound refuses
// is not lost: the hub tries it again once the window has room, unless a
// newer one replaced it (#29.6: a state change is never lost behind
// superseded ones). Before, the directory stayed as it was until the
// device happened to send another.
func TestRefusedDirectoryIsAppliedLater(t *testing.T) {
	old := dirRetryAfter
	dirRetryAfter = 50 * time.Millisecond
	t.Cleanup(func() { dirRetryAfter = old })
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	th := startHub(t, Config{Now: func() time.Time { return time.Unix(0, now.Load()) }})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	n := relay.MaxDirectoryRooms
	has := func(prefix string) bool { return len(th.Hub.dir.project("p1")[prefix+"-0"]) == 1 }
	for _, prefix := range []string{"a", "b", "c"} {
		data, _ := json.Marshal(relay.RoomsChanged{Rooms: roomSet("p1", prefix, n)})
		if err := a.write(mustEncode(t, &relay.Event{Event: relay.EventRoomsChanged, Time: time.Now(), Data: data})); err != nil {
			t.Fatal(err)
		}
		if prefix != "c" {
			waitFor(t, "directory "+prefix, func() bool { return has(prefix) })
		}
	}
	// "c" is refused (a second rename of every room in the window); a
	// command round trip shows the hub has read it.
	th.roundTrip(dev)
	if has("c") {
		t.Fatal("the second rename in the window was applied at once")
	}
	now.Add(int64(dirMarkerTTL))
	waitFor(t, "the refused directory applied once the window allows", func() bool { return has("c") && !has("b") })
}

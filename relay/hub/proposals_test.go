package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

func TestProposalWaitEndpoint(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	decide := func(pid, state, instance string) {
		t.Helper()
		data, _ := json.Marshal(relay.ProposalDecided{ProposalID: pid, Project: "p1", RoomID: "room-1",
			State: state, InstanceID: instance, DecidedAt: time.Now().UTC()})
		ev := &relay.Event{Event: relay.EventProposalDecided, Time: time.Now(), Data: data}
		if err := a.write(mustEncode(t, ev)); err != nil {
			t.Fatal(err)
		}
	}

	// Refusals: admin token, device, proposal id, wait bounds.
	if _, err := hubclient.New(th.URL(), "wrong").WaitProposal(ctx, dev, "prop_1", 0); !hubclient.IsCode(err, "unauthorized") {
		t.Errorf("wrong admin token: %v", err)
	}
	if _, err := th.cl.WaitProposal(ctx, "nodev", "prop_1", 0); !hubclient.IsCode(err, "not_found") {
		t.Errorf("unknown device: %v", err)
	}
	for _, q := range []string{"wait=2m", "wait=-1s", "wait=soon"} {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, th.URL()+"/v1/devices/"+dev+"/proposals/prop_1?"+q, nil)
		req.Header.Set("Authorization", "Bearer "+testAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", q, resp.StatusCode)
		}
	}
	if _, err := th.cl.WaitProposal(ctx, dev, "prop.1", 0); !hubclient.IsCode(err, "invalid_request") {
		t.Errorf("proposal id with a dot: %v", err)
	}

	// Never routed through the hub: not_found at once, even with a wait
	// (no long poll was ever parked for it).
	for _, wait := range []time.Duration{0, 30 * time.Second} {
		_, err := th.cl.WaitProposal(ctx, dev, "prop_1", wait)
		if !hubclient.IsCode(err, "not_found") {
			t.Fatalf("unknown proposal, wait %s: %v; want not_found", wait, err)
		}
		if n := th.waitsStarted.Load(); n != 0 {
			t.Fatalf("unknown proposal, wait %s: the hub parked %d wait(s) before refusing", wait, n)
		}
	}
	// The device answers a propose command (the fake agent echoes the args,
	// proposal_id included): now it reads pending, at once or after the wait.
	propose := func(pid string) {
		t.Helper()
		res, _, err := th.cl.Command(ctx, dev, hubapi.CommandRequest{ID: "c-" + pid, ProjectID: "p1", Name: relay.CmdProposeRoomSnippetApp,
			Args: json.RawMessage(`{"proposal_id":"` + pid + `"}`)})
		if err != nil || res.Error != nil {
			t.Fatalf("propose %s: %+v %v", pid, res, err)
		}
	}
	propose("prop_1")
	for _, wait := range []time.Duration{0, 100 * time.Millisecond} {
		st, err := th.cl.WaitProposal(ctx, dev, "prop_1", wait)
		if err != nil || st.State != hubapi.ProposalPending || st.ProposalID != "prop_1" {
			t.Fatalf("undecided, wait %s: %+v %v", wait, st, err)
		}
	}
	// A failed propose teaches the hub nothing.
	if res, _, err := th.cl.Command(ctx, dev, hubapi.CommandRequest{ID: "c-fail", ProjectID: "p1", Name: relay.CmdReadRoomAppStatus, Args: json.RawMessage(`{"proposal_id":"prop_9"}`)}); err != nil || res.Error == nil {
		t.Fatalf("fail command: %+v %v", res, err)
	}
	if _, err := th.cl.WaitProposal(ctx, dev, "prop_9", 0); !hubclient.IsCode(err, "not_found") {
		t.Fatalf("prop_9 after a failed command: %v; want not_found", err)
	}

	// A caller blocked in the long poll gets the decision when it arrives.
	got := make(chan *hubapi.ProposalState, 1)
	go func() {
		st, err := th.cl.WaitProposal(ctx, dev, "prop_1", 30*time.Second)
		if err != nil {
			t.Errorf("long poll: %v", err)
		}
		got <- st
	}()
	// Decide only once the wait is parked on its watch, so the event
	// wakes it (a decision stored first would be read, not waited for).
	waitFor(t, "the long poll parked", func() bool { return th.ProposalWaits() == 1 })
	select {
	case st := <-got:
		t.Fatalf("the long poll answered before any decision: %+v", st)
	default:
	}
	decide("prop_1", "approved", "app_123")
	st := <-got
	if st == nil || st.State != hubapi.ProposalApproved || st.InstanceID != "app_123" || st.RoomID != "room-1" || st.DecidedAt.IsZero() {
		t.Fatalf("long poll result %+v", st)
	}

	// A decision already recorded is answered without waiting, with or
	// without ?wait; a decline has no instance.
	propose("prop_2")
	decide("prop_2", "declined", "")
	st, err := th.cl.WaitProposal(ctx, dev, "prop_2", 30*time.Second)
	if err != nil || st.State != hubapi.ProposalDeclined || st.InstanceID != "" {
		t.Fatalf("declined: %+v %v", st, err)
	}
	st, err = th.cl.WaitProposal(ctx, dev, "prop_1", 0)
	if err != nil || st.State != hubapi.ProposalApproved || st.InstanceID != "app_123" {
		t.Fatalf("approved, read back: %+v %v", st, err)
	}
	// Decisions are per device: another device knows no proposal of that id.
	dev2, _ := th.enroll("p1")
	if _, err := th.cl.WaitProposal(ctx, dev2, "prop_1", 0); !hubclient.IsCode(err, "not_found") {
		t.Fatalf("other device: %v; want not_found", err)
	}
}

func TestParseWait(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"": 0, "30s": 30 * time.Second, "30": 30 * time.Second, "1m": time.Minute, "0": 0} {
		if got, err := parseWait(in); err != nil || got != want {
			t.Errorf("parseWait(%q) = %s, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"61s", "-1s", "x", "1h"} {
		if _, err := parseWait(in); err == nil {
			t.Errorf("parseWait(%q) accepted", in)
		}
	}
}

func TestEventsAndProposals(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// A decision is recorded only for a proposal the hub routed.
	if res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdProposeRoomSnippetApp,
		Args: json.RawMessage(`{"proposal_id":"prop-1"}`)}); res.Error != nil {
		t.Fatalf("propose: %+v", res.Error)
	}
	waited := make(chan *hubapi.DeviceEvent, 1)
	go func() {
		st, err := th.WaitProposal(ctx, dev, "prop-1", 15*time.Second)
		if err != nil || st.State != hubapi.ProposalApproved {
			t.Errorf("wait proposal: %+v %v", st, err)
		}
		ev, err := th.waitDecision(ctx, dev, "prop-1") // recorded: at once
		if err != nil {
			t.Errorf("read the decision: %v", err)
		}
		waited <- ev
	}()
	// The decision comes only once the wait is parked on its watch, so it is
	// the event that wakes it, not a read of something already stored.
	waitFor(t, "the wait parked", func() bool { return th.ProposalWaits() == 1 })
	send := func(ev *relay.Event) {
		if err := a.write(mustEncode(t, ev)); err != nil {
			t.Fatal(err)
		}
	}
	send(&relay.Event{Event: relay.EventPolicyChanged, Time: time.Now(),
		Data: json.RawMessage(`{"policy":[{"project":"p1","commands":["read_room","list_room_apps"]}]}`)})
	send(&relay.Event{Event: relay.EventProposalDecided, Time: time.Now(),
		Data: json.RawMessage(`{"proposal_id":"prop-1","state":"approved","project":"p1","room_id":"r1","instance_id":"app_1","decided_at":"2026-01-01T00:00:00Z"}`)})
	ev := <-waited
	if ev == nil || ev.DeviceID != dev || ev.Event != relay.EventProposalDecided || !strings.Contains(string(ev.Data), "approved") {
		t.Fatalf("proposal event %+v", ev)
	}
	// Recorded: a later waiter gets it at once.
	if ev, err := th.waitDecision(ctx, dev, "prop-1"); err != nil || ev == nil {
		t.Fatalf("second wait: %v", err)
	}
	waitFor(t, "policy update", func() bool {
		d, err := th.cl.Device(ctx, dev)
		return err == nil && len(d.Policy) == 1 && len(d.Policy[0].Commands) == 2
	})
}

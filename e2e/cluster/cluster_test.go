//go:build linux

package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// state is what the scenarios create and every later fault must keep.
type state struct {
	agent       *agentDev
	raws        []*rawDevice // enrolled over the API
	proposal    string       // routed to the agent, pending review
	clientToken string
}

// with is c for a subtest: helpers fail the subtest, not its parent.
func (c *cluster) with(t *testing.T) *cluster {
	cc := *c
	cc.t = t
	return &cc
}

// TestCluster runs the fault scenarios in order on one cluster; each one
// restores what it broke, so a failure does not hide the next scenario.
func TestCluster(t *testing.T) {
	c := newCluster(t)
	c.startHubs()
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	// Paired on hub-c, enrolled through the balancer (hub-a or hub-b).
	agent := c.addAgent("laptop", hubC, c.lb.url(), "r1", "r2", "r3")
	c.waitOnline(hubC, agent.id, 30*time.Second, "agent online through the balancer", hubA.name, hubB.name)
	st := &state{agent: agent}

	t.Run("cross_node", func(t *testing.T) { testCrossNode(c.with(t), st) })
	t.Run("read_your_writes", func(t *testing.T) { testReadYourWrites(c.with(t)) })
	t.Run("oauth_revocation", func(t *testing.T) { testOAuthRevocation(c.with(t)) })
	t.Run("nats_node_killed", func(t *testing.T) { testNATSNodeKilled(c.with(t), st) })
	t.Run("hub_node_killed", func(t *testing.T) { testHubNodeKilled(c.with(t), st) })
	t.Run("full_restart", func(t *testing.T) {
		if testing.Short() {
			t.Skip("full restart of every process: skipped with -short")
		}
		testFullRestart(c.with(t), st)
	})
}

// TestConcurrentStart starts three hubs at once on a fresh cluster, as an
// operator's deploy does: they race to create the same replicated buckets
// and must all become ready.
func TestConcurrentStart(t *testing.T) {
	c := newCluster(t)
	for _, h := range c.hubs {
		h.start(t)
	}
	start := time.Now()
	c.waitHubsReady(60*time.Second, "three hubs started together on a fresh cluster")
	t.Logf("three hubs started together: all ready after %s", since(start))
	a := c.addAgent("laptop", c.hubs[2], c.lb.url(), "r1")
	c.waitOnline(c.hubs[2], a.id, 30*time.Second, "agent online", c.hubs[0].name, c.hubs[1].name)
	c.readRoom(c.hubs[2], a, "r1", "after a concurrent start")
}

// testCrossNode: the caller's hub is never the agent's; pairing on one
// node and enrollment on another.
func testCrossNode(c *cluster, st *state) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	d := c.waitOnline(hubC, st.agent.id, 30*time.Second, "agent online", hubA.name, hubB.name)
	on := d.Presence.Node
	other := hubA
	if on == hubA.name {
		other = hubB
	}
	for _, r := range st.agent.rooms {
		c.readRoom(hubC, st.agent, r, "caller on hub-c, agent on "+on)
	}
	c.readRoom(other, st.agent, "r1", "caller on "+other.name+", agent on "+on)

	raw, err := c.enrollRaw(hubA, hubB)
	if err != nil {
		t.Fatalf("pairing on hub-a, enrollment on hub-b: %v", err)
	}
	st.raws = append(st.raws, raw)
	for _, h := range c.hubs {
		if _, err := c.device(h, raw.id); err != nil {
			t.Fatalf("device enrolled on hub-b, read on %s: %v", h.name, err)
		}
	}

	files := map[string]string{"src/App.tsx": "export default function App() { return <p>cluster</p> }\n"}
	args := map[string]any{"room_id": "r1", "name": "cluster-app", "files": files,
		"idempotency_key": relay.SnippetKey("r1", "cluster-app", files)}
	res, status := c.call(hubC, st.agent.id, relay.CmdProposeRoomSnippetApp, args, 15*time.Second)
	var pr struct {
		ProposalID string `json:"proposal_id"`
	}
	if !res.OK || json.Unmarshal(res.Result, &pr) != nil || pr.ProposalID == "" {
		t.Fatalf("propose through hub-c to the agent on %s: status %d error %v result %s", on, status, res.Error, res.Result)
	}
	for _, h := range []*hubNode{hubA, hubB} {
		ps, err := h.cl.WaitProposal(context.Background(), st.agent.id, pr.ProposalID, 0)
		if err != nil || ps.State != hubapi.ProposalPending {
			t.Fatalf("proposal routed by hub-c, read on %s: %+v %v", h.name, ps, err)
		}
	}
	st.proposal = pr.ProposalID

	tok, err := hubB.cl.CreateClientToken(context.Background(), project, hubapi.ScopeRead, "cluster-test")
	if err != nil {
		t.Fatalf("client token on hub-b: %v", err)
	}
	st.clientToken = tok.ID
	c.checkState(hubA, st, "a client token made on hub-b, read on hub-a")
}

// testReadYourWrites: what one node has just written, another node reads
// at once. A replicated bucket's direct get may be answered by a replica
// that has not applied the write yet; a "not found" from one would refuse
// a pairing code made a moment ago, or a device enrolled a moment ago
// (401 at connect, which an agent does not retry).
func testReadYourWrites(c *cluster) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	for i := range 100 {
		pairOn, enrollOn, connectOn := hubC, hubA, hubB
		if i%2 == 1 {
			pairOn, enrollOn, connectOn = hubB, hubC, hubA
		}
		raw, err := c.enrollRaw(pairOn, enrollOn)
		if err != nil {
			t.Fatalf("round %d: %v", i, err)
		}
		if err := raw.connect(t, connectOn.addr); err != nil {
			t.Fatalf("round %d: enrolled on %s, connecting to %s at once: %v", i, enrollOn.name, connectOn.name, err)
		}
		raw.close()
		if _, err := hubA.cl.Revoke(context.Background(), raw.id); err != nil {
			t.Fatalf("round %d: revoke: %v", i, err)
		}
	}
	// How often a replica lagged (not asserted: it depends on the load).
	for _, h := range c.hubs {
		t.Logf("%s: %s", h.name, c.metricLines(h, "roomrelay_hub_kv_stale_reads_total{"))
	}
}

// metricLines are the lines of h's /metrics that start with prefix.
func (c *cluster) metricLines(h *hubNode, prefix string) string {
	req, _ := http.NewRequest(http.MethodGet, h.url()+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+adminToken)
	resp, err := c.http.Do(req)
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, prefix) {
			out = append(out, strings.TrimPrefix(l, "roomrelay_hub_"))
		}
	}
	return strings.Join(out, ", ")
}

// testNATSNodeKilled: kill -9 of the JetStream meta leader.
func testNATSNodeKilled(c *cluster, st *state) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	leader := c.metaLeader()
	victim := c.nats[0]
	for _, n := range c.nats {
		if n.name == leader {
			victim = n
		}
	}
	fault := fmt.Sprintf("kill -9 of NATS node %s (meta leader %q)", victim.name, leader)
	defer func() {
		if !victim.running() {
			victim.start(t)
			c.waitNATS(victim, 30*time.Second)
			c.waitHubsReady(30*time.Second, "restart of NATS node "+victim.name)
		}
	}()
	killAt := time.Now()
	victim.kill(t)

	// A leader election may answer 503 for a moment: poll, bounded.
	c.waitHubsReady(30*time.Second, fault)
	t.Logf("%s: every hub readyz 200 after %s", fault, since(killAt))
	c.waitOnline(hubC, st.agent.id, 30*time.Second, fault+": agent online", hubA.name, hubB.name)
	// The first command may meet interest that is still moving to the
	// surviving servers (a hub that reconnected resubscribes); after one
	// answer every command must route.
	poll(t, 10*time.Second, fault+": a first command through hub-c", func() (bool, string) {
		res, status := c.call(hubC, st.agent.id, relay.CmdReadRoom, map[string]string{"room_id": "r1"}, 5*time.Second)
		return res.OK, fmt.Sprintf("status %d error %v", status, res.Error)
	})
	for i := range 6 {
		c.readRoom(c.hubs[i%3], st.agent, st.agent.rooms[i%3], fault)
	}
	t.Logf("%s: 6 commands through the three hubs answered %s after the kill", fault, since(killAt))

	var raw *rawDevice
	poll(t, 20*time.Second, fault+": pair on hub-b, enroll on hub-c", func() (bool, string) {
		var err error
		raw, err = c.enrollRaw(hubB, hubC)
		if err != nil {
			return false, err.Error()
		}
		return true, ""
	})
	st.raws = append(st.raws, raw)
	t.Logf("%s: a new enrollment done %s after the kill", fault, since(killAt))
	if err := raw.connect(t, hubA.addr); err != nil {
		t.Fatalf("%s: the new device's token on hub-a: %v", fault, err)
	}
	c.waitOnline(hubC, raw.id, 15*time.Second, fault+": the new device online", hubA.name)
	raw.close()
	c.checkState(hubC, st, fault)
	c.checkState(hubA, st, fault)
}

// testHubNodeKilled: kill -9 of the hub holding the agent (behind the
// balancer) with a command in flight on it, and of a device connected to it
// directly.
func testHubNodeKilled(c *cluster, st *state) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	d := c.waitOnline(hubC, st.agent.id, 30*time.Second, "before the hub kill: agent online", hubA.name, hubB.name)
	victim, survivor := hubA, hubB
	if d.Presence.Node == hubB.name {
		victim, survivor = hubB, hubA
	}
	fault := "kill -9 of hub node " + victim.name
	defer func() {
		if !victim.running() {
			victim.start(t)
			c.waitHubsReady(60*time.Second, "restart of "+victim.name)
		}
	}()

	// A device on the victim directly, which will not come back: it must
	// read offline within seconds of the crash.
	direct, err := c.enrollRaw(hubC, victim)
	if err != nil {
		t.Fatal(err)
	}
	st.raws = append(st.raws, direct)
	directAt := time.Now()
	if err := direct.connect(t, victim.addr); err != nil {
		t.Fatalf("device connecting to %s: %v", victim.name, err)
	}
	c.waitOnline(hubC, direct.id, 15*time.Second, "device connected to "+victim.name, victim.name)

	// Put a command in flight on the victim: the balancer swallows what the
	// victim sends the agent, so the frame is written but never answered.
	up := c.lb.upstream(victim.addr)
	up.held.Store(0)
	up.hold.Store(true)
	defer up.hold.Store(false)
	type answer struct {
		res    *relay.Result
		status int
		at     time.Time
	}
	answered := make(chan answer, 1)
	const timeout = 20 * time.Second
	sent := time.Now()
	go func() {
		res, status := c.call(hubC, st.agent.id, relay.CmdReadRoom, map[string]string{"room_id": "r1"}, timeout)
		answered <- answer{res, status, time.Now()}
	}()
	// A command frame is over 150 bytes; pings are a few.
	poll(t, 10*time.Second, "the command reached "+victim.name, func() (bool, string) {
		n := up.held.Load()
		return n >= 120, fmt.Sprintf("%d bytes from %s held", n, victim.name)
	})
	killAt := time.Now()
	victim.kill(t)
	up.hold.Store(false)

	var ans answer
	select {
	case ans = <-answered:
	case <-time.After(timeout + 20*time.Second):
		t.Fatalf("%s: the in-flight command never answered", fault)
	}
	t.Logf("%s: the in-flight command (%d bytes held) answered %s after the kill: status %d error %v",
		fault, up.held.Load(), ans.at.Sub(killAt).Round(time.Millisecond), ans.status, ans.res.Error)
	if ans.res.Error == nil || ans.res.Error.Code != relay.CodeDeviceOffline || !ans.at.Before(sent.Add(timeout)) {
		t.Errorf("%s with a command in flight on it: want device_offline before the command's %s deadline, got status %d ok=%v error=%v after %s",
			fault, timeout, ans.status, ans.res.OK, ans.res.Error, ans.at.Sub(sent).Round(time.Millisecond))
	}

	back := c.waitOnline(hubC, st.agent.id, 30*time.Second, fault+": agent online again through "+survivor.name, survivor.name)
	t.Logf("%s: agent online through %s %s after the kill", fault, survivor.name, since(killAt))
	if back.Presence.Session == d.Presence.Session {
		t.Errorf("%s: presence still names the dead session %s", fault, d.Presence.Session)
	}
	now := time.Now().Add(time.Second)
	if ls := back.Presence.LastSeen; ls.Before(killAt) || ls.After(now) {
		t.Errorf("%s: presence last_seen %s, want between the kill (%s) and now", fault, ls, killAt)
	}
	if back.LastSeen.Before(killAt) {
		t.Errorf("%s: device last_seen %s is before the kill (%s)", fault, back.LastSeen, killAt)
	}
	c.readRoom(hubC, st.agent, "r2", fault+": after the agent moved to "+survivor.name)

	poll(t, 10*time.Second, fault+": its directly connected device reads offline", func() (bool, string) {
		dd, err := c.device(hubC, direct.id)
		if err != nil {
			return false, err.Error()
		}
		p := dd.Presence
		if p.State != hubapi.StateOffline {
			return false, p.State + " on " + p.Node
		}
		if p.LastSeen.IsZero() || p.LastSeen.After(killAt.Add(time.Second)) || p.LastSeen.Before(directAt.Add(-time.Second)) {
			t.Fatalf("%s: offline device's last_seen %s, want between its connect (%s) and the kill (%s)", fault, p.LastSeen, directAt, killAt)
		}
		return true, ""
	})
	t.Logf("%s: the device connected to it directly reads offline %s after the kill", fault, since(killAt))
}

// testFullRestart: every NATS node and hub killed; the hubs start first and
// must wait for JetStream.
func testFullRestart(c *cluster, st *state) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	fault := "full restart (every NATS node and hub killed, the hubs started first)"
	for _, h := range c.hubs {
		h.kill(t)
	}
	for _, n := range c.nats {
		n.kill(t)
	}
	for _, h := range c.hubs {
		h.start(t)
	}
	// Not a wait for something to happen: the case under test is a hub
	// that finds no NATS at all and must keep retrying, not exit.
	time.Sleep(2 * time.Second)
	for _, h := range c.hubs {
		if !h.running() {
			t.Fatalf("%s: %s exited while NATS was down instead of waiting for it (--startup-timeout)", fault, h.name)
		}
	}
	natsAt := time.Now()
	for _, n := range c.nats {
		n.start(t)
	}
	for _, n := range c.nats {
		c.waitNATS(n, 30*time.Second)
	}
	c.waitHubsReady(90*time.Second, fault)
	t.Logf("%s: every hub readyz 200 %s after the NATS nodes started", fault, since(natsAt))
	c.checkState(hubC, st, fault)
	// The agent kept retrying through the balancer; its backoff is capped
	// at 60 s, so this bound is what a correct agent needs at worst.
	c.waitOnline(hubC, st.agent.id, 75*time.Second, fault+": agent back online", hubA.name, hubB.name)
	t.Logf("%s: agent back online %s after the NATS nodes started", fault, since(natsAt))
	c.readRoom(hubC, st.agent, "r3", fault)
	if len(st.raws) > 0 {
		r := st.raws[0]
		r.close()
		if err := r.connect(t, hubB.addr); err != nil {
			t.Fatalf("%s: a device enrolled before, connecting with its token: %v", fault, err)
		}
		c.waitOnline(hubC, r.id, 15*time.Second, fault+": that device online", hubB.name)
	}
}

func since(t0 time.Time) time.Duration { return time.Since(t0).Round(10 * time.Millisecond) }

// checkState fails the test when a device, the client token or the
// proposal is gone; it polls only while the hub answers 503 (a bucket's
// leader election), never over a wrong answer.
func (c *cluster) checkState(h *hubNode, st *state, fault string) {
	c.t.Helper()
	t := c.t
	poll(t, 20*time.Second, fault+": state readable on "+h.name, func() (bool, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		devs, err := h.cl.Devices(ctx)
		if err != nil {
			return false, "devices: " + err.Error()
		}
		byID := map[string]hubapi.Device{}
		for _, d := range devs {
			byID[d.ID] = d
		}
		ids := []string{st.agent.id}
		for _, r := range st.raws {
			ids = append(ids, r.id)
		}
		for _, id := range ids {
			d, ok := byID[id]
			if !ok {
				t.Fatalf("%s: device %s is gone from %s's list (%d devices)", fault, id, h.name, len(devs))
			}
			if d.Revoked {
				t.Fatalf("%s: device %s reads revoked on %s", fault, id, h.name)
			}
		}
		if st.clientToken != "" {
			toks, err := h.cl.ClientTokens(ctx)
			if err != nil {
				return false, "client tokens: " + err.Error()
			}
			found := false
			for _, tk := range toks {
				found = found || (tk.ID == st.clientToken && !tk.Revoked)
			}
			if !found {
				t.Fatalf("%s: client token %s is gone from %s (%d tokens)", fault, st.clientToken, h.name, len(toks))
			}
		}
		if st.proposal != "" {
			ps, err := h.cl.WaitProposal(ctx, st.agent.id, st.proposal, 0)
			if hubclient.IsCode(err, "not_found") {
				t.Fatalf("%s: %s forgot the proposal %s the hub routed", fault, h.name, st.proposal)
			}
			if err != nil {
				return false, "proposal: " + err.Error()
			}
			if ps.State != hubapi.ProposalPending {
				t.Fatalf("%s: proposal %s reads %s, want pending", fault, st.proposal, ps.State)
			}
		}
		return true, ""
	})
}

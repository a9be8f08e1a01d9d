package hub

import (
	"context"
	"encoding/json"
	"errors"
	"slices"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// This file is what arrives for a session from elsewhere: the agent's
// events, routed commands and control messages (kick, revoke, cancel), and
// the rule that decides which of a device's sessions is the newest.

// Bounds on what one device can make the hub store through events.
const (
	// MaxEventData bounds an event's data, except rooms_changed, which
	// carries up to relay.MaxDirectoryRooms entries and is not stored as an
	// event.
	MaxEventData     = 16 << 10
	maxDirectoryData = 512 << 10
	// eventRate and eventBurst bound events per session: a burst fits the
	// owner deciding many proposals at once and an outbox flushed after a
	// reconnect (at most 1,000 queued by the agent). Past them the hub
	// slows or coalesces events (session_events.go); it does not close.
	eventRate  = 120 // per minute
	eventBurst = 1000
)

// dirRetryAfter is how long a directory refused by the churn bound waits
// before it is tried again (a variable for tests).
var dirRetryAfter = dirMarkerTTL / 6

// storedEvents are the event kinds the hub records in RR_EVENTS; any other
// kind is handled (or ignored) without being stored.
var storedEvents = map[string]bool{relay.EventProposalDecided: true, relay.EventPolicyChanged: true, relay.EventSleeping: true}

// applyEvent records what an admitted event says (handleEvent decides
// when: session_events.go). Callers hold s.evApply, so two events of one
// kind are never applied out of order.
func (s *session) applyEvent(ev *relay.Event) {
	h := s.h
	rec := hubapi.DeviceEvent{DeviceID: s.dev, Session: s.id, Event: ev.Event, Time: ev.Time,
		ReceivedAt: h.cfg.Now().UTC(), Data: ev.Data}
	body := mustJSON(rec)
	if storedEvents[ev.Event] {
		if err := h.nc.Publish(eventSubject(s.dev, ev.Event), body); err != nil {
			s.log().Warn("publish event", "event", ev.Event, "err", err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
	defer cancel()
	switch ev.Event {
	case relay.EventSleeping:
		s.setPresence(ctx, func(p *presenceRec) {
			p.State, p.Since = hubapi.StateSleeping, h.cfg.Now().UTC()
		})
	case relay.EventProviderChanged:
		var ps relay.ProviderState
		if json.Unmarshal(ev.Data, &ps) != nil {
			s.log().Info("provider_changed event without a readable state")
			return
		}
		s.setPresence(ctx, func(p *presenceRec) { p.App = appPresence(&ps) })
	case relay.EventPolicyChanged:
		pol, ok := parsePolicy(ev.Data)
		if !ok {
			s.log().Info("policy_changed event without a readable policy")
			return
		}
		if _, err := h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error { d.Policy = cleanPolicy(d, pol); return nil }); err != nil {
			s.log().Warn("record policy", "err", err)
		}
	case relay.EventAuditHead:
		s.recordAuditHead(ctx, ev.Data)
	case relay.EventRoomsChanged:
		var rc relay.RoomsChanged
		if json.Unmarshal(ev.Data, &rc) != nil || rc.Rooms == nil {
			s.log().Info("rooms_changed event without a readable room list")
			return
		}
		d, _, err := getJSON[deviceRec](ctx, h.st.devices, s.dev)
		if err != nil {
			s.log().Warn("read device for its directory", "err", err)
			return
		}
		if err := h.setDirectory(ctx, d, rc.Rooms); errors.Is(err, errDirectoryChurn) {
			// Not lost: tried again when the churn window has room, unless
			// a newer directory replaces it first.
			s.log().Info("record room directory later", "err", err)
			s.retryEvent(ev, dirRetryAfter)
		} else if err != nil {
			s.log().Warn("record room directory", "err", err)
		}
	case relay.EventProposalDecided:
		var d struct {
			ProposalID string `json:"proposal_id"`
		}
		_ = json.Unmarshal(ev.Data, &d)
		if !kvKeyRe.MatchString(d.ProposalID) {
			s.log().Info("proposal_decided event without a usable proposal_id")
			return
		}
		// Only proposals a cloud caller made through the hub are recorded:
		// a device cannot fill the bucket with decisions on ids it made up.
		if routed, err := h.routedProposal(ctx, s.dev, d.ProposalID); err != nil || !routed {
			s.log().Info("decision on a proposal the hub never routed; not recorded", "proposal", d.ProposalID, "err", err)
			return
		}
		if _, err := h.st.proposals.Put(ctx, proposalKey(s.dev, d.ProposalID), body); err != nil {
			s.log().Warn("record proposal decision", "err", err)
		}
	}
}

// Bounds on what a hello may say about the device.
const (
	maxAgentVersion = 64
	maxOS           = 32
)

// cleanPolicy keeps of a device's policy summary only the projects the hub
// enrolled it for and the known command names, so what `hub devices` shows
// is bounded and names nothing the device may not serve.
func cleanPolicy(d *deviceRec, pol []relay.ProjectPolicy) []relay.ProjectPolicy {
	out := []relay.ProjectPolicy{}
	for _, p := range pol {
		if !d.hasProject(p.Project) || slices.ContainsFunc(out, func(o relay.ProjectPolicy) bool { return o.Project == p.Project }) {
			continue
		}
		cmds := []string{}
		for _, c := range p.Commands {
			if relay.KnownCommand(c) && !slices.Contains(cmds, c) {
				cmds = append(cmds, c)
			}
		}
		out = append(out, relay.ProjectPolicy{Project: p.Project, Commands: cmds})
	}
	return out
}

// parsePolicy accepts {"policy":[...]} or a bare [...].
func parsePolicy(raw json.RawMessage) ([]relay.ProjectPolicy, bool) {
	var wrapped struct {
		Policy *[]relay.ProjectPolicy `json:"policy"`
	}
	if json.Unmarshal(raw, &wrapped) == nil && wrapped.Policy != nil {
		return *wrapped.Policy, true
	}
	var bare []relay.ProjectPolicy
	if json.Unmarshal(raw, &bare) == nil && bare != nil {
		return bare, true
	}
	return nil, false
}

func proposalKey(dev, proposal string) string { return dev + "." + proposal }

// dispatch handles command deliveries for every session, and kick/revoke
// messages for this node's sockets.
func (h *Hub) dispatch(ctx context.Context, ctl <-chan *nats.Msg) {
	for {
		select {
		case <-ctx.Done():
			return
		case m := <-h.cmdCh:
			h.mu.Lock()
			s := h.bySub[m.Sub]
			h.mu.Unlock()
			if s == nil {
				_ = m.Respond(mustJSON(&relay.Result{ID: "", Error: relay.Errorf(relay.CodeDeviceOffline, "the device disconnected")}))
				continue
			}
			s.startCommand(m)
		case m := <-ctl:
			var c ctlMsg
			if json.Unmarshal(m.Data, &c) != nil {
				continue
			}
			h.control(deviceFromCtl(m.Subject), c)
		}
	}
}

// ctlOp is what a device's control message (rr.dev.<id>.ctl) asks of
// every node.
type ctlOp string

const (
	opKick    ctlOp = "kick"    // a newer session went online: older ones close
	opRevoke  ctlOp = "revoke"  // the device was revoked: its sessions close
	opChanged ctlOp = "changed" // the device record changed: drop the cached copy
	opCancel  ctlOp = "cancel"  // a command's caller is gone: cancel it on the device
)

// control applies one control message about dev on this node; an op it
// does not know (a newer node's) is ignored.
func (h *Hub) control(dev string, c ctlMsg) {
	switch c.Op {
	case opRevoke:
		h.closeRevoked(dev)
	case opChanged:
		h.devs.forget(dev)
	case opCancel:
		for _, s := range h.localSessions(dev) {
			s.cancelCommand(c.Command)
		}
	case opKick:
		h.kick(dev, c)
	}
}

// kick closes this node's sessions of dev older than the one that sent c
// (on a draining node it hands them over instead).
func (h *Hub) kick(dev string, c ctlMsg) {
	local := h.localSessions(dev)
	if len(local) > 0 {
		h.newest.kicked(dev, c.Epoch) // before reading epochs: see newest
	}
	for _, s := range local {
		// Epoch 0 means still setting up: it checks h.newest once it
		// stored its epoch (see goOnline).
		if e := s.epoch.Load(); s.id == c.Session || e == 0 || e >= c.Epoch {
			continue
		}
		if h.isClosing() {
			// Make-before-break: the agent moved its session off this
			// draining node. New commands go to the new one; the agent
			// closes this one once its running commands have answered here.
			s.handOver()
			continue
		}
		s.closeWith(relay.CloseReplaced, "a newer session of this device took over")
	}
}

// deviceFromCtl extracts <id> from rr.dev.<id>.ctl.
func deviceFromCtl(subj string) string {
	const pre, suf = "rr.dev.", ".ctl"
	if len(subj) > len(pre)+len(suf) {
		return subj[len(pre) : len(subj)-len(suf)]
	}
	return ""
}

// newest decides "the newest session of a device wins" on this node. A
// session's epoch is the presence revision its online write got; a kick
// carries the epoch of a session that just went online (on any node).
// Both orders of "a kick arrives" and "a session learns its epoch" end the
// same way: the session with the lower epoch closes. Without the record of
// kicks a session still setting up (epoch not yet stored) would miss a
// newer session's kick, and both would serve until the next refresh.
type newest struct {
	mu    sync.Mutex
	kicks map[string]uint64 // device → highest kick epoch seen, for devices with local sessions
}

// kicked records a kick; the caller then closes local sessions whose
// stored epoch is below it.
func (n *newest) kicked(dev string, epoch uint64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.kicks == nil {
		n.kicks = map[string]uint64{}
	}
	if epoch > n.kicks[dev] {
		n.kicks[dev] = epoch
	}
}

// superseded reports, for a session that has just stored its epoch,
// whether a newer session's kick was already seen.
func (n *newest) superseded(dev string, epoch uint64) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.kicks[dev] > epoch
}

// forget drops a device's record once it has no session on this node.
func (n *newest) forget(dev string) {
	n.mu.Lock()
	defer n.mu.Unlock()
	delete(n.kicks, dev)
}

package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// MaxProposalWait caps ?wait= on GET /v1/devices/{id}/proposals/{pid}, so a
// long poll never outlives the proxies in front of the hub.
const MaxProposalWait = 60 * time.Second

// routedKey marks, in the proposals bucket, a proposal whose propose_*
// command returned through this hub. It cannot collide with proposalKey:
// device ids start with "dev-".
func routedKey(dev, proposal string) string { return "routed." + dev + "." + proposal }

// noteProposal records that the device answered a propose_* command with a
// proposal id, before the caller sees that id, so GET .../proposals/{pid}
// can tell "pending" from "no such proposal". It outlives the caller's
// request: a caller that left still proposed.
func (h *Hub) noteProposal(ctx context.Context, dev string, res *relay.Result) {
	var out struct {
		ProposalID string `json:"proposal_id"`
	}
	if json.Unmarshal(res.Result, &out) != nil || !kvKeyRe.MatchString(out.ProposalID) {
		h.log.Warn("a propose result without a usable proposal_id", "device", dev)
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := h.st.proposals.Create(ctx, routedKey(dev, out.ProposalID), []byte("{}")); err != nil && !errors.Is(err, jetstream.ErrKeyExists) {
		// The proposal then reads as not_found until decided; say so.
		h.log.Error("record routed proposal", "device", dev, "proposal", out.ProposalID, "err", err)
	}
}

// routedProposal reports whether a propose_* command of the device returned
// pid through this hub.
func (h *Hub) routedProposal(ctx context.Context, dev, pid string) (bool, error) {
	_, err := h.st.proposals.Get(ctx, routedKey(dev, pid))
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return false, nil
	}
	return err == nil, err
}

// ProposalWaits is how many WaitProposal calls are parked on this node
// now, waiting for a decision (a gauge for operators; tests use it to know
// a long poll is in place before they decide).
func (h *Hub) ProposalWaits() int { return int(h.waitsParked.Load()) }

// WaitProposal returns the owner's decision on a proposal of device dev,
// waiting up to wait (at most MaxProposalWait) for it: as soon as the
// device's proposal_decided event arrives (a KV watch, no polling), or with
// state pending when the wait ends. wait 0 reads the current state. A
// proposal whose propose_* command returned through the hub reads pending
// until decided; an id the hub never routed nor saw decided is a not_found
// *Error (a typo, or another device's proposal), so a caller does not wait
// for something that cannot happen.
func (h *Hub) WaitProposal(ctx context.Context, dev, pid string, wait time.Duration) (*hubapi.ProposalState, error) {
	if !deviceIDRe.MatchString(dev) {
		return nil, errNoDevice
	}
	if !kvKeyRe.MatchString(pid) {
		return nil, errInvalid("the proposal id must be 1–128 characters of letters, digits, '_', '=', '-'")
	}
	if wait < 0 || wait > MaxProposalWait {
		return nil, errInvalid("wait must be between 0s and %s", MaxProposalWait)
	}
	if _, _, err := getJSON[deviceRec](ctx, h.st.devices, dev); errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, errNoDevice
	} else if err != nil {
		return nil, unavailable("read the device", err)
	}
	// A recorded decision answers at once; otherwise the id must be one the
	// hub routed before it is worth waiting for.
	ev, _, err := getJSON[hubapi.DeviceEvent](ctx, h.st.proposals, proposalKey(dev, pid))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		ev = nil
		routed, err := h.routedProposal(ctx, dev, pid)
		if err != nil {
			return nil, unavailable("read the proposal", err)
		}
		if !routed {
			return nil, &Error{Code: hubapi.CodeNotFound,
				Message: fmt.Sprintf("no proposal %s of device %s: the hub knows a proposal once its propose_* command returned through it", pid, dev)}
		}
		if wait > 0 {
			wctx, cancel := context.WithTimeout(ctx, wait)
			h.waitsStarted.Add(1)
			h.waitsParked.Add(1)
			ev, err = h.waitDecision(wctx, dev, pid)
			h.waitsParked.Add(-1)
			cancel()
			if err != nil && ctx.Err() != nil {
				return nil, ctx.Err() // the caller left or the hub is stopping
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				return nil, unavailable("watch the proposal", err)
			}
		}
	case err != nil:
		return nil, unavailable("read the proposal", err)
	}
	out := &hubapi.ProposalState{ProposalID: pid, State: hubapi.ProposalPending}
	if ev != nil {
		var d relay.ProposalDecided
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			return nil, fmt.Errorf("the stored decision on proposal %s is unreadable: %w", pid, err)
		}
		out = &hubapi.ProposalState{ProposalID: pid, State: d.State, Project: d.Project, RoomID: d.RoomID,
			InstanceID: d.InstanceID, DecidedAt: d.DecidedAt, ReceivedAt: ev.ReceivedAt}
	}
	return out, nil
}

// waitDecision blocks until the device reports a decision on the proposal
// (a proposal_decided event), or ctx ends. A decision recorded earlier is
// returned at once. Any node can wait: decisions live in a KV bucket.
func (h *Hub) waitDecision(ctx context.Context, deviceID, proposalID string) (*hubapi.DeviceEvent, error) {
	w, err := h.st.proposals.Watch(ctx, proposalKey(deviceID, proposalID), jetstream.IgnoreDeletes())
	if err != nil {
		return nil, fmt.Errorf("wait proposal: %w", err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("wait proposal: %w", ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, errors.New("wait proposal: watcher closed")
			}
			if e == nil {
				continue // end of the initial values
			}
			var ev hubapi.DeviceEvent
			if err := json.Unmarshal(e.Value(), &ev); err != nil {
				return nil, fmt.Errorf("wait proposal: decode: %w", err)
			}
			return &ev, nil
		}
	}
}

// parseWait reads ?wait= as a Go duration ("30s") or whole seconds ("30").
func parseWait(s string) (time.Duration, error) {
	if s == "" {
		return 0, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		n, nerr := strconv.Atoi(s)
		if nerr != nil {
			return 0, fmt.Errorf("wait %q: want a duration such as 30s, at most %s", s, MaxProposalWait)
		}
		d = time.Duration(n) * time.Second
	}
	if d < 0 || d > MaxProposalWait {
		return 0, fmt.Errorf("wait %q: want between 0s and %s", s, MaxProposalWait)
	}
	return d, nil
}

package hub

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
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

// handleProposal answers GET /v1/devices/{id}/proposals/{pid}[?wait=30s]:
// the owner's decision on a proposal, waiting up to wait for it. A proposal
// whose propose_* command returned through the hub reads pending until the
// device's proposal_decided event arrives; an id the hub never routed nor
// saw decided is not_found (a typo, or another device's proposal), so a
// caller does not long-poll for something that cannot happen.
func (h *Hub) handleProposal(w http.ResponseWriter, r *http.Request) {
	dev, ok := h.deviceID(w, r)
	if !ok {
		return
	}
	pid := r.PathValue("pid")
	if !kvKeyRe.MatchString(pid) {
		writeError(w, http.StatusBadRequest, "invalid_request", "the proposal id must be 1–128 characters of letters, digits, '_', '=', '-'")
		return
	}
	wait, err := parseWait(r.URL.Query().Get("wait"))
	if err != nil {
		writeError(w, http.StatusBadRequest, "invalid_request", err.Error())
		return
	}
	ctx := r.Context()
	if _, _, err := getJSON[deviceRec](ctx, h.st.devices, dev); errors.Is(err, jetstream.ErrKeyNotFound) {
		writeError(w, http.StatusNotFound, "not_found", "no such device")
		return
	} else if err != nil {
		h.log.Error("read device for proposal", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not read the device; retry")
		return
	}

	// A recorded decision answers at once; otherwise the id must be one the
	// hub routed before it is worth waiting for.
	ev, _, err := getJSON[hubapi.DeviceEvent](ctx, h.st.proposals, proposalKey(dev, pid))
	switch {
	case errors.Is(err, jetstream.ErrKeyNotFound):
		ev = nil
		routed, err := h.routedProposal(ctx, dev, pid)
		if err != nil {
			h.log.Error("read proposal", "err", err)
			writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not read the proposal; retry")
			return
		}
		if !routed {
			writeError(w, http.StatusNotFound, "not_found", fmt.Sprintf("no proposal %s of device %s: the hub knows a proposal once its propose_* command returned through it", pid, dev))
			return
		}
		if wait > 0 {
			wctx, cancel := context.WithTimeout(ctx, wait)
			ev, err = h.WaitProposal(wctx, dev, pid)
			cancel()
			if err != nil && ctx.Err() != nil {
				return // the caller left or the hub is stopping
			}
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				h.log.Error("wait proposal", "err", err)
				writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not watch the proposal; retry")
				return
			}
		}
	case err != nil:
		h.log.Error("read proposal", "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the hub could not read the proposal; retry")
		return
	}
	out := hubapi.ProposalState{ProposalID: pid, State: hubapi.ProposalPending}
	if ev != nil {
		var d relay.ProposalDecided
		if err := json.Unmarshal(ev.Data, &d); err != nil {
			h.log.Error("stored proposal decision is unreadable", "device", dev, "proposal", pid, "err", err)
			writeError(w, http.StatusInternalServerError, "internal", "the stored decision is unreadable")
			return
		}
		out = hubapi.ProposalState{ProposalID: pid, State: d.State, Project: d.Project, RoomID: d.RoomID,
			InstanceID: d.InstanceID, DecidedAt: d.DecidedAt, ReceivedAt: ev.ReceivedAt}
	}
	writeJSON(w, http.StatusOK, out)
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

package hub

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The audit anchor: the hub keeps, in each device record, the furthest
// audit head (sequence and hash, never contents) the device reported in
// hello, on a result frame or in an audit_head event, and gives it back to the device's own
// token (GET /v1/device/audit-head) for `roomrelay audit verify` and
// `doctor`. One small record per device: bounded by the devices.

// auditHeadRec is the anchor as the device record keeps it.
type auditHeadRec struct {
	Seq  uint64    `json:"seq"`
	Hash string    `json:"hash"`
	At   time.Time `json:"at"`
}

// advanceAuditHead records h in d if it is valid and further than what d
// holds. The anchor never moves back, nor to another hash at the same
// seq: a device whose log was deleted or forked, and that reports the new
// chain's head, keeps showing the gap. It reports whether d changed.
func advanceAuditHead(d *deviceRec, h *relay.AuditHead, now time.Time) bool {
	if !h.Valid() || (d.AuditHead != nil && h.Seq <= d.AuditHead.Seq) {
		return false
	}
	d.AuditHead = &auditHeadRec{Seq: h.Seq, Hash: h.Hash, At: now}
	return true
}

// recordAuditHead handles an audit_head event.
func (s *session) recordAuditHead(ctx context.Context, data json.RawMessage) {
	var ah relay.AuditHead
	if json.Unmarshal(data, &ah) != nil || !ah.Valid() {
		s.log().Info("audit_head event without a readable head")
		return
	}
	s.storeAuditHead(ctx, &ah)
}

// errAnchorStays: the device record already holds this head or a further
// one; nothing to write.
var errAnchorStays = errors.New("the anchor is already there")

// storeAuditHead moves the device record's anchor to h (advanceAuditHead),
// writing only when it moves.
func (s *session) storeAuditHead(ctx context.Context, h *relay.AuditHead) {
	now := s.h.cfg.Now().UTC()
	_, err := s.h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error {
		if !advanceAuditHead(d, h, now) {
			return errAnchorStays
		}
		return nil
	})
	if err != nil && !errors.Is(err, errAnchorStays) {
		s.log().Warn("record audit head", "err", err)
	}
}

// anchorCommit records the audit heads that result frames carry before
// their results are answered, so the anchor is never behind a command the
// cloud has seen. One KV update covers every result that arrived while the
// previous one ran (a group commit: a busy device costs one write per
// round trip, not one per command); the reader never waits for it.
type anchorCommit struct {
	mu      sync.Mutex
	seq     uint64           // the furthest head recorded (or refused) for this session
	want    *relay.AuditHead // the furthest head waiting to be recorded
	waiting []func()         // answers held until want is recorded
	running bool             // a committer goroutine runs
	wg      sync.WaitGroup   // the committer; the session's end waits for it
}

// afterAnchor runs answer once the anchor covers h: at once when h is
// absent, malformed or already recorded, else after the next write.
func (s *session) afterAnchor(h *relay.AuditHead, answer func()) {
	a := &s.anchor
	a.mu.Lock()
	if !h.Valid() || h.Seq <= a.seq {
		a.mu.Unlock()
		answer()
		return
	}
	if a.want == nil || h.Seq > a.want.Seq {
		a.want = h
	}
	a.waiting = append(a.waiting, answer)
	if a.running {
		a.mu.Unlock()
		return
	}
	a.running = true
	a.wg.Add(1)
	a.mu.Unlock()
	go s.commitAnchors()
}

// commitAnchors writes the furthest waiting head and answers what waited
// for it, until nothing waits.
func (s *session) commitAnchors() {
	a := &s.anchor
	defer a.wg.Done()
	for {
		a.mu.Lock()
		want, waiting := a.want, a.waiting
		a.want, a.waiting = nil, nil
		if want == nil {
			a.running = false
			a.mu.Unlock()
			return
		}
		a.mu.Unlock()
		ctx, cancel := context.WithTimeout(context.Background(), opTimeout)
		// A failed write still answers: the command ran, and the next
		// result or hello carries the head again.
		s.storeAuditHead(ctx, want)
		cancel()
		a.mu.Lock()
		a.seq = max(a.seq, want.Seq)
		a.mu.Unlock()
		for _, answer := range waiting {
			answer()
		}
	}
}

// handleAuditHead is GET /v1/device/audit-head, authenticated by the
// device token.
func (h *Hub) handleAuditHead(w http.ResponseWriter, r *http.Request) error {
	d, err := h.st.deviceForToken(r.Context(), bearer(r))
	if err != nil {
		return err
	}
	out := hubapi.DeviceAuditHead{DeviceID: d.ID}
	if a := d.AuditHead; a != nil {
		out.Seq, out.Hash, out.ReportedAt = a.Seq, a.Hash, a.At
	}
	writeJSON(w, http.StatusOK, out)
	return nil
}

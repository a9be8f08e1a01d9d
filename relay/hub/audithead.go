package hub

import (
	"context"
	"encoding/json"
	"net/http"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The audit anchor: the hub keeps, in each device record, the furthest
// audit head (sequence and hash, never contents) the device reported in
// hello or an audit_head event, and gives it back to the device's own
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
	now := s.h.cfg.Now().UTC()
	if _, err := s.h.st.updateDevice(ctx, s.dev, func(d *deviceRec) error {
		advanceAuditHead(d, &ah, now)
		return nil
	}); err != nil {
		s.log().Warn("record audit head", "err", err)
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

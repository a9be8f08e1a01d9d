package hubapi

import "time"

// DeviceAuditHead is GET /v1/device/audit-head: the furthest audit head the
// device reported (relay.AuditHead), the anchor `roomrelay audit verify`
// and `doctor` compare the local log with. Seq 0: none reported yet.
type DeviceAuditHead struct {
	DeviceID   string    `json:"device_id"`
	Seq        uint64    `json:"seq"`
	Hash       string    `json:"hash,omitempty"`
	ReportedAt time.Time `json:"reported_at,omitzero"`
}

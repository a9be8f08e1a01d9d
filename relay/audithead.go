package relay

// AuditHead is where a device's hash-chained audit log ends: the sequence
// number and hash of its last durable line. The agent reports it in hello
// and in audit_head events so the hub can keep an anchor off the device:
// deleting or truncating the local log then no longer erases the history
// without a trace. It carries no audit content.
type AuditHead struct {
	Seq  uint64 `json:"seq"`
	Hash string `json:"hash"` // 64 lowercase hex digits
}

// EventAuditHead is the event kind whose Data is an AuditHead, sent when
// the head moved since the last report.
const EventAuditHead = "audit_head"

// Valid reports whether h names a line: seq above 0, a SHA-256 hex hash.
func (h *AuditHead) Valid() bool {
	if h == nil || h.Seq == 0 || len(h.Hash) != 64 {
		return false
	}
	for _, c := range h.Hash {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

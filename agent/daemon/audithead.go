package daemon

import (
	"context"
	"encoding/json"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/relay"
)

// The audit anchor: the agent tells the hub where its audit log ends (the
// head record's seq and hash, never a line) in hello and, when the head
// moved, in an audit_head event at most once per auditHeadEvery. The hub
// keeps the furthest one, so `roomrelay audit verify` and `doctor` can tell
// a deleted, truncated or rewritten log from an empty one.

// auditHeadEvery bounds how often an audit_head event is queued: the head
// moves with every command, the hub's event budget is per minute.
const auditHeadEvery = time.Minute

type auditAnchor struct {
	sent   audit.Head
	sentAt time.Time
}

// auditHead is the durable head of the audit log (nil if none yet): in
// hello and on every result frame (the agent adds it after the command's
// audit line is written), from memory, so it costs no file read.
func (d *Daemon) auditHead() *relay.AuditHead {
	h, ok := d.audit.Head()
	if !ok || h.Seq == 0 {
		return nil
	}
	return &relay.AuditHead{Seq: h.Seq, Hash: h.Hash}
}

// announceAuditHead queues an audit_head event when the head moved since the
// last one and auditHeadEvery passed. Only Run's goroutine calls it.
func (d *Daemon) announceAuditHead(ctx context.Context) {
	now := time.Now()
	if now.Sub(d.anchor.sentAt) < auditHeadEvery {
		return
	}
	h := d.auditHead()
	if h == nil || (audit.Head{Seq: h.Seq, Hash: h.Hash}) == d.anchor.sent {
		return
	}
	data, _ := json.Marshal(h)
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventAuditHead, Time: now.UTC(), Data: data}); err != nil {
		d.log.Warn("audit_head event not queued", "err", err)
		return
	}
	d.anchor = auditAnchor{sent: audit.Head{Seq: h.Seq, Hash: h.Hash}, sentAt: now}
}

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

// auditEvery is auditHeadEvery, or a test's shorter interval.
func (d *Daemon) auditEvery() time.Duration {
	if d.cfg.auditEvery > 0 {
		return d.cfg.auditEvery
	}
	return auditHeadEvery
}

// noteAuditMoved tells housekeep that line seq was written; it never
// blocks. A read's line becomes the durable head a group commit later.
func (d *Daemon) noteAuditMoved(seq uint64) {
	d.auditWritten.Store(seq)
	select {
	case d.auditMoved <- struct{}{}:
	default:
	}
}

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

// auditDelay is how long housekeep waits before announcing a moved head:
// the rest of auditHeadEvery since the last announcement, and while a
// written line is not yet durable (a read's, group-committed), a moment
// more; 0 when nothing waits.
func (d *Daemon) auditDelay() (time.Duration, bool) {
	h, _ := d.audit.Head()
	if d.auditWritten.Load() <= d.anchor.sent.Seq && h.Seq <= d.anchor.sent.Seq {
		return 0, false // announced already
	}
	wait := d.auditEvery() - time.Since(d.anchor.sentAt)
	if h.Seq < d.auditWritten.Load() {
		wait = max(wait, auditSettle)
	}
	return max(wait, 0), true
}

// auditSettle is the wait for a group commit to make a read's line the
// durable head (the log's sync window is milliseconds).
const auditSettle = 50 * time.Millisecond

// announceAuditHead queues an audit_head event when the head moved since the
// last one and auditHeadEvery passed. Only Run's goroutine calls it.
func (d *Daemon) announceAuditHead(ctx context.Context) {
	now := time.Now()
	if now.Sub(d.anchor.sentAt) < d.auditEvery() {
		return
	}
	h := d.auditHead()
	if h == nil || (audit.Head{Seq: h.Seq, Hash: h.Hash}) == d.anchor.sent {
		return
	}
	data, _ := json.Marshal(h)
	if err := d.agent.SendEvent(ctx, relay.Event{Event: relay.EventAuditHead, Time: now.UTC(), Data: data}); err != nil {
		d.log.Warn("audit_head event not queued", "err", err)
		d.anchor.sentAt = now // tried: the next try waits auditHeadEvery, as a tick did
		return
	}
	d.anchor = auditAnchor{sent: audit.Head{Seq: h.Seq, Hash: h.Hash}, sentAt: now}
	d.stats.auditHeads.Add(1)
}

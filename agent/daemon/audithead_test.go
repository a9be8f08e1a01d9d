package daemon

import (
	"context"
	"fmt"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/relay"
)

// TestAuditHeadIsAnnounced: the hello's audit head is the audit log's
// durable head, and a moved head is queued as one audit_head event at most
// once per auditHeadEvery (#24 finding 12).
func TestAuditHeadIsAnnounced(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx := context.Background()
	d, err := Open(ctx, Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t"})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if h := d.auditHead(); h != nil {
		t.Fatalf("head of an empty log: %+v", h)
	}
	d.announceAuditHead(ctx)
	if d.anchor.sentAt != (time.Time{}) {
		t.Fatal("an empty log's head was announced")
	}
	for range 3 {
		if _, err := d.audit.Append(audit.Entry{Time: time.Now(), CommandID: "c", Project: "p1", Command: relay.CmdReadRoom, Decision: audit.Allowed}); err != nil {
			t.Fatal(err)
		}
	}
	want, _, _ := audit.ReadHead(filepath.Join(dir, "s", AuditDir))
	if h := d.auditHead(); h == nil || h.Seq != 3 || h.Hash != want.Hash || !h.Valid() {
		t.Fatalf("head %+v, want seq 3 hash %s", h, want.Hash)
	}
	d.announceAuditHead(ctx)
	if d.anchor.sent != want {
		t.Fatalf("announced %+v, want %+v", d.anchor.sent, want)
	}
	d.audit.Append(audit.Entry{Time: time.Now(), CommandID: "c", Project: "p1", Command: relay.CmdReadRoom, Decision: audit.Allowed})
	d.announceAuditHead(ctx) // within auditHeadEvery: not again
	if d.anchor.sent != want {
		t.Fatalf("announced again within %v: %+v", auditHeadEvery, d.anchor.sent)
	}
}

// TestAuditHeadWithoutATick: where inotify replaces housekeep's minute
// tick, a command's audit line still reaches the hub as an audit_head event
// (the line arms a one-shot timer). That an idle agent then arms no timer
// is not checked here: bench/idle measures its wakeups.
func TestAuditHeadWithoutATick(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d, err := Open(ctx, Config{ConfigDir: filepath.Join(dir, "c"), StateDir: filepath.Join(dir, "s"), DataDir: filepath.Join(dir, "d"),
		HubURL: "http://127.0.0.1:1", DeviceID: "dev-test", Token: "t", auditEvery: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	done := make(chan struct{})
	go func() { defer close(done); d.housekeep(ctx) }()
	defer func() { cancel(); <-done }()
	for want := int64(1); want <= 2; want++ {
		d.record(&relay.Command{ID: fmt.Sprint("c", want), Name: relay.CmdReadRoom, ProjectID: "p1"}, &relay.Result{}, time.Millisecond, false)
		deadline := time.Now().Add(10 * time.Second)
		for d.stats.auditHeads.Load() < want {
			if time.Now().After(deadline) {
				t.Fatalf("audit line %d written; %d audit_head events queued, want %d", want, d.stats.auditHeads.Load(), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
}

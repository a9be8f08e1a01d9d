package agent

import (
	"context"
	"database/sql"
	"fmt"
	"net/url"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// TestReadsSkipDurableMarks: a read leaves nothing in the dedupe store (it
// needs no started or result mark), yet a duplicate delivered while it runs
// still shares its one run; a write is recorded.
func TestReadsSkipDurableMarks(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	dir := t.TempDir()
	a := newTestAgent(t, hub, dir, nil)
	var runs atomic.Int32
	release := make(chan struct{})
	started := make(chan struct{}, 4)
	slow := func(ctx context.Context, cmd *relay.Command) (any, error) {
		started <- struct{}{}
		<-release
		return map[string]int32{"run": runs.Add(1)}, nil
	}
	a.Register(relay.CmdReadRoom, slow)
	a.Register(relay.CmdProposeRoomSnippetApp, counting(&runs))
	start(t, a)
	c := hub.next(t)

	read := command("read-1", relay.CmdReadRoom, `{"room_id":"r1"}`)
	c.send(read)
	<-started
	c.send(read)
	eventually(t, "duplicate parked", func() bool {
		a.cmds.mu.Lock()
		defer a.cmds.mu.Unlock()
		return a.cmds.calls["read-1"] != nil && len(a.cmds.calls["read-1"].waiters) == 1
	})
	close(release)
	r1, r2 := c.result(t), c.result(t)
	if !r1.OK || string(r1.Result) != string(r2.Result) || runs.Load() != 1 {
		t.Fatalf("duplicate read: runs %d, results %s / %s", runs.Load(), r1.Result, r2.Result)
	}
	if n, err := a.cmds.store.count(context.Background()); err != nil || n != 0 {
		t.Fatalf("the dedupe store holds %d entries after a read (%v); want 0", n, err)
	}
	c.send(command("write-1", relay.CmdProposeRoomSnippetApp, `{}`))
	if r := c.result(t); !r.OK {
		t.Fatalf("write: %+v", r)
	}
	e, err := a.cmds.store.lookup(context.Background(), "write-1")
	if err != nil || e == nil || e.State != stateDone {
		t.Fatalf("write not recorded: %+v %v", e, err)
	}
	// Reads and fresh writes cost no query on the store's one connection
	// (its in-memory index of stored ids answers), yet a read reusing a
	// stored write's id is still refused as a conflict, also after a
	// restart (the index is loaded when the store opens).
	if n := a.cmds.store.lookups.Load(); n != 1 {
		t.Fatalf("%d store lookups; want 1 (this test's own)", n)
	}
	c.send(command("write-1", relay.CmdReadRoom, `{"room_id":"r1"}`))
	if r := c.result(t); r.OK || r.Error.Code != relay.CodeIdempotencyConflict {
		t.Fatalf("a read reusing a write's id: %+v", r)
	}
	reopened, err := openDedupe(context.Background(), dir, RealClock(), time.Hour, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer reopened.Close()
	if !reopened.known("write-1") || reopened.known("read-1") {
		t.Fatalf("index after reopening: write-1 %v, read-1 %v", reopened.known("write-1"), reopened.known("read-1"))
	}
}

// TestWriteStartedMarkIsCommittedBeforeItsHandler: while a write's handler
// runs, another connection to the store (as a second process would open)
// already sees its started mark, i.e. the mark's transaction committed
// (synchronous=FULL: fsync'd) before the handler began.
func TestWriteStartedMarkIsCommittedBeforeItsHandler(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	dir := t.TempDir()
	a := newTestAgent(t, hub, dir, nil)
	other, err := sql.Open("sqlite", "file:"+(&url.URL{Path: filepath.Join(dir, DedupeFile)}).EscapedPath()+"?mode=ro&_pragma=busy_timeout(5000)")
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	seen := make(chan string, 1)
	a.Register(relay.CmdProposeRoomSnippetApp, func(ctx context.Context, cmd *relay.Command) (any, error) {
		var state string
		err := other.QueryRowContext(ctx, `SELECT state FROM commands WHERE id = ?`, cmd.ID).Scan(&state)
		seen <- fmt.Sprintf("%s %v", state, err)
		return map[string]bool{"ok": true}, nil
	})
	start(t, a)
	c := hub.next(t)
	c.send(command("w-1", relay.CmdProposeRoomSnippetApp, `{}`))
	if r := c.result(t); !r.OK {
		t.Fatalf("write: %+v", r)
	}
	if got := <-seen; got != "started <nil>" {
		t.Errorf("inside the handler another connection read %q; want the committed started mark", got)
	}
}

// TestConcurrentWriteMarksShareATransaction: marks that queue while a
// transaction commits go into the next one together.
func TestConcurrentWriteMarksShareATransaction(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	st, err := openDedupe(context.Background(), dir, RealClock(), time.Hour, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// Hold the database's one connection, so the first mark's transaction
	// cannot begin until the other seven have queued behind it.
	ctx := context.Background()
	conn, err := st.db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	fresh := make([]bool, 8)
	for i := range 8 {
		wg.Go(func() {
			ok, err := st.markStarted(ctx, command(fmt.Sprint("c-", i), relay.CmdProposeRoomSnippetApp, ""))
			if err != nil {
				t.Error(err)
			}
			fresh[i] = ok
		})
	}
	// Every mark is with the commit loop (in the transaction waiting for
	// the connection, or queued for the next one).
	eventually(t, "marks queued", func() bool { return st.queued.Load() == 8 && st.db.Stats().WaitCount > 0 })
	conn.Close()
	wg.Wait()
	for i, ok := range fresh {
		if !ok {
			t.Errorf("mark %d not fresh", i)
		}
	}
	if n := st.commits.Load(); n > 2 {
		t.Errorf("8 concurrent marks took %d transactions; want at most 2 (the one waiting, and one for all queued behind it)", n)
	}
	if n, _ := st.count(ctx); n != 8 {
		t.Errorf("%d marks stored, want 8", n)
	}
}

// TestStatusFileNotRewrittenPerCommand: 200 commands cause a handful of
// status file writes (state changes, and counters at most once per
// statusEvery), not one or two per command.
func TestStatusFileNotRewrittenPerCommand(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	var runs atomic.Int32
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	before := a.statusWrites.Load()
	t0 := time.Now()
	for i := range 200 {
		c.send(command(fmt.Sprint("s-", i), "count", ""))
		if r := c.result(t); !r.OK {
			t.Fatal(r.Error)
		}
	}
	// An upper bound from the loop's own duration: one counter write per
	// started statusEvery, plus one.
	allowed := int64(time.Since(t0)/statusEvery) + 2
	if got := a.statusWrites.Load() - before; got > allowed {
		t.Errorf("200 commands rewrote status.json %d times; want at most %d", got, allowed)
	}
	// The counters still reach the file.
	eventually(t, "in_flight 0 in the file", func() bool {
		st, err := ReadStatusFile(a.cfg.StateDir)
		return err == nil && st.InFlight == 0 && a.statusWrites.Load() > before
	})
}

// TestStatusCountersCoalesce runs the status writer in virtual time:
// counter changes over three seconds give one write per second at most,
// the first at once, and none while nothing changes.
func TestStatusCountersCoalesce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		a, err := New(Config{HubURL: "http://127.0.0.1:1", DeviceID: "dev_x", Token: "t", StateDir: t.TempDir(), Logger: testLogger(t)})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		a.lazyStatus.Store(true)
		done := make(chan struct{})
		go func() { defer close(done); a.statusLoop(ctx) }()

		a.setCounts(func(s *Status) { s.InFlight = 1 })
		synctest.Wait()
		if got := a.statusWrites.Load(); got != 1 {
			t.Fatalf("after the first change: %d writes, want 1 at once", got)
		}
		for range 300 { // 3 s of changes every 10 ms
			a.setCounts(func(s *Status) { s.InFlight++ })
			time.Sleep(10 * time.Millisecond)
		}
		synctest.Wait()
		if got := a.statusWrites.Load(); got < 3 || got > 4 {
			t.Errorf("3 s of changes: %d writes, want 3 or 4 (at most one per second)", got)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		final := a.statusWrites.Load()
		time.Sleep(time.Minute)
		synctest.Wait()
		if got := a.statusWrites.Load(); got != final {
			t.Errorf("idle: %d more writes", got-final)
		}
		st, err := ReadStatusFile(a.cfg.StateDir)
		if err != nil || st.InFlight != 301 {
			t.Errorf("file says in_flight %d (%v), want the last value 301", st.InFlight, err)
		}
		cancel()
		<-done
	})
}

// TestPruneDropsIdsFromTheIndex: the in-memory index follows the rows prune
// deletes, so it stays bounded by the store's count limit, and an id pruned
// from the store reads as never seen there too.
func TestPruneDropsIdsFromTheIndex(t *testing.T) {
	t.Parallel()
	clock := newFakeClock()
	st, err := openDedupe(context.Background(), t.TempDir(), clock, time.Hour, 2, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	ctx := context.Background()
	for _, id := range []string{"w1", "w2", "w3"} {
		cmd := command(id, relay.CmdProposeRoomSnippetApp, `{}`)
		if _, err := st.markStarted(ctx, cmd); err != nil {
			t.Fatal(err)
		}
		if err := st.finish(ctx, cmd, &relay.Result{ID: id, OK: true}); err != nil {
			t.Fatal(err)
		}
		clock.Advance(time.Second)
	}
	if err := st.prune(ctx); err != nil {
		t.Fatal(err)
	}
	if st.known("w1") || !st.known("w2") || !st.known("w3") {
		t.Fatalf("after pruning to 2: w1 %v, w2 %v, w3 %v", st.known("w1"), st.known("w2"), st.known("w3"))
	}
	clock.Advance(2 * time.Hour) // past the TTL: everything goes
	if err := st.prune(ctx); err != nil {
		t.Fatal(err)
	}
	if st.known("w2") || st.known("w3") {
		t.Fatal("ids past the TTL are still indexed")
	}
}

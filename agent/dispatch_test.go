package agent

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// auditLog records Audit calls.
type auditLog struct {
	mu   sync.Mutex
	recs []string // "id code" or "id ok"
}

func (l *auditLog) hook(cmd *relay.Command, res *relay.Result, _ time.Duration, refused bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := cmd.ID + " ok"
	if !res.OK {
		s = cmd.ID + " " + string(res.Error.Code)
	}
	if refused {
		s += " refused"
	}
	l.recs = append(l.recs, s)
}

func (l *auditLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.recs...)
}

func counting(n *atomic.Int32) Handler {
	return func(ctx context.Context, cmd *relay.Command) (any, error) {
		return map[string]int32{"run": n.Add(1)}, nil
	}
}

func wantCode(t *testing.T, r *relay.Result, id string, code relay.Code) {
	t.Helper()
	if r.ID != id || r.OK || r.Error == nil || r.Error.Code != code {
		t.Fatalf("result = %+v (error %+v), want %s failing with %s", r, r.Error, id, code)
	}
	if r.Error.Message == "" {
		t.Errorf("%s: empty message", code)
	}
}

func TestRedeliveryRunsTheHandlerOnce(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var runs atomic.Int32
	var audit auditLog
	a := newTestAgent(t, hub, "", func(c *Config) { c.Audit = audit.hook })
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)
	cmd := command("same-id", "count", "")
	c.send(cmd)
	r1 := c.result(t)
	c.send(cmd)
	r2 := c.result(t)
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", runs.Load())
	}
	if !r1.OK || string(r1.Result) != `{"run":1}` || string(r2.Result) != string(r1.Result) || r2.ID != r1.ID {
		t.Errorf("results differ: %+v / %+v", r1, r2)
	}
	if got := audit.all(); len(got) != 2 {
		t.Errorf("audit = %v, want both deliveries", got)
	}
	// Reusing the id for another command is a conflict, not a silent replay.
	other := command("same-id", "other", "")
	c.send(other)
	wantCode(t, c.result(t), "same-id", relay.CodeIdempotencyConflict)
}

func TestConcurrentDuplicateWaitsForTheFirst(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var runs atomic.Int32
	var audit auditLog
	a := newTestAgent(t, hub, "", func(c *Config) { c.Audit = audit.hook })
	release := make(chan struct{})
	started := make(chan struct{}, 10)
	a.Register("slow", func(ctx context.Context, cmd *relay.Command) (any, error) {
		started <- struct{}{}
		<-release
		return map[string]int32{"run": runs.Add(1)}, nil
	})
	start(t, a)
	c := hub.next(t)
	cmd := command("dup", "slow", "")
	c.send(cmd)
	<-started
	c.send(cmd)
	c.send(cmd)
	// The duplicates are parked on the running call, not run and not busy.
	eventually(t, "duplicates parked", func() bool {
		a.cmds.mu.Lock()
		defer a.cmds.mu.Unlock()
		return a.cmds.calls["dup"] != nil && len(a.cmds.calls["dup"].waiters) == 2
	})
	close(release)
	var results []string
	for range 3 {
		r := c.result(t)
		if !r.OK || r.ID != "dup" {
			t.Fatalf("result = %+v", r)
		}
		results = append(results, string(r.Result))
	}
	if runs.Load() != 1 || results[0] != results[1] || results[1] != results[2] {
		t.Errorf("runs = %d, results = %v", runs.Load(), results)
	}
	eventually(t, "3 audit records", func() bool { return len(audit.all()) == 3 })
}

// TestDuplicateOfARefusedCommandIsRefusedToo: a duplicate delivery that
// waited on a command the guard refused (a room outside the owner's list
// answers not_found, like a missing room) is audited with the same
// verdict, not as an allowed not_found.
func TestDuplicateOfARefusedCommandIsRefusedToo(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var audit auditLog
	release := make(chan struct{})
	entered := make(chan struct{}, 4)
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Audit = audit.hook
		c.Guard = func(ctx context.Context, cmd *relay.Command) error {
			entered <- struct{}{}
			<-release
			return relay.RoomNotFound("hidden")
		}
	})
	var runs atomic.Int32
	a.Register(relay.CmdReadRoom, counting(&runs))
	start(t, a)
	c := hub.next(t)
	cmd := command("hid", relay.CmdReadRoom, `{"room_id":"hidden"}`)
	c.send(cmd)
	<-entered
	c.send(cmd)
	eventually(t, "duplicate parked", func() bool {
		a.cmds.mu.Lock()
		defer a.cmds.mu.Unlock()
		return a.cmds.calls["hid"] != nil && len(a.cmds.calls["hid"].waiters) == 1
	})
	close(release)
	for range 2 {
		wantCode(t, c.result(t), "hid", relay.CodeNotFound)
	}
	eventually(t, "both audited", func() bool { return len(audit.all()) == 2 })
	if got := strings.Join(audit.all(), "|"); got != "hid not_found refused|hid not_found refused" {
		t.Errorf("audit = %s, want both deliveries refused", got)
	}
	if runs.Load() != 0 {
		t.Errorf("handler ran %d times", runs.Load())
	}
}

func TestDedupeSurvivesAnAgentRestart(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	dir := t.TempDir()
	var runs atomic.Int32
	a := newTestAgent(t, hub, dir, nil)
	a.Register("count", counting(&runs))
	stop, _, _ := start(t, a)
	c := hub.next(t)
	cmd := command("persist-1", "count", "")
	c.send(cmd)
	r1 := c.result(t)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	var runs2 atomic.Int32
	b := newTestAgent(t, hub, dir, nil)
	b.Register("count", counting(&runs2))
	start(t, b)
	c2 := hub.next(t)
	c2.send(cmd)
	r2 := c2.result(t)
	if runs.Load() != 1 || runs2.Load() != 0 {
		t.Errorf("runs = %d then %d, want 1 then 0", runs.Load(), runs2.Load())
	}
	if string(r2.Result) != string(r1.Result) || !r2.OK {
		t.Errorf("after restart %+v, want the stored %+v", r2, r1)
	}
}

func TestStartedButUnfinishedIsNotReRun(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	dir := t.TempDir()
	cmd := command("crashed", "count", "")
	// An earlier agent process marked the command started and then died.
	st, err := openDedupe(context.Background(), dir, RealClock(), time.Hour, 100, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	if ok, err := st.markStarted(context.Background(), cmd); !ok || err != nil {
		t.Fatalf("markStarted = %v, %v", ok, err)
	}
	st.Close()

	var runs atomic.Int32
	a := newTestAgent(t, hub, dir, nil)
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)
	for range 2 {
		c.send(cmd)
		r := c.result(t)
		wantCode(t, r, "crashed", relay.CodeInternal)
		if !strings.Contains(r.Error.Message, "interrupted by an agent restart; not re-run") {
			t.Errorf("message = %q", r.Error.Message)
		}
	}
	if runs.Load() != 0 {
		t.Errorf("handler ran %d times, want 0", runs.Load())
	}
}

func TestCommandsThatMustNotRun(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var runs atomic.Int32
	var audit auditLog
	var guarded []string
	var gmu sync.Mutex
	a := newTestAgent(t, hub, "", func(c *Config) {
		c.Audit = audit.hook
		c.Guard = func(ctx context.Context, cmd *relay.Command) error {
			gmu.Lock()
			guarded = append(guarded, cmd.ID)
			gmu.Unlock()
			if _, ok := ctx.Deadline(); !ok {
				t.Error("guard ctx has no deadline")
			}
			switch cmd.ProjectID {
			case "p-off":
				return relay.Errorf(relay.CodeProjectNotEnabled, "project %s is not enabled on this device", cmd.ProjectID)
			case "p-plain":
				return errors.New("not in the allowlist")
			}
			return nil
		}
	})
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)

	expired := command("exp", "count", "")
	expired.Deadline = time.Now().Add(-time.Second)
	c.send(expired)
	wantCode(t, c.result(t), "exp", relay.CodeExpired)

	c.send(command("unknown", "rm_rf", ""))
	wantCode(t, c.result(t), "unknown", relay.CodeCommandNotAllowed)

	off := command("off", "count", "")
	off.ProjectID = "p-off"
	c.send(off)
	wantCode(t, c.result(t), "off", relay.CodeProjectNotEnabled)

	plain := command("plain", "count", "")
	plain.ProjectID = "p-plain"
	c.send(plain)
	r := c.result(t)
	wantCode(t, r, "plain", relay.CodeCommandNotAllowed)
	if !strings.Contains(r.Error.Message, "not in the allowlist") {
		t.Errorf("message = %q", r.Error.Message)
	}

	if runs.Load() != 0 {
		t.Errorf("handler ran %d times, want 0", runs.Load())
	}
	// A denial is not stored: once allowed (and in time), the id may run.
	c.send(command("exp", "count", ""))
	if r := c.result(t); !r.OK {
		t.Errorf("retry of a refused id: %+v", r)
	}
	gmu.Lock()
	if strings.Join(guarded, ",") != "off,plain,exp" {
		t.Errorf("guard saw %v; expired and unknown commands must not reach it", guarded)
	}
	gmu.Unlock()
	want := []string{"exp expired", "unknown command_not_allowed", "off project_not_enabled refused", "plain command_not_allowed refused", "exp ok"}
	if got := audit.all(); strings.Join(got, "|") != strings.Join(want, "|") {
		t.Errorf("audit = %v, want %v", got, want)
	}
}

func TestBusyBeyondMaxInFlight(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var audit auditLog
	a := newTestAgent(t, hub, "", func(c *Config) { c.MaxInFlight = 2; c.Audit = audit.hook })
	release := make(chan struct{})
	started := make(chan string, 10)
	a.Register("slow", func(ctx context.Context, cmd *relay.Command) (any, error) {
		started <- cmd.ID
		<-release
		return cmd.ID, nil
	})
	start(t, a)
	c := hub.next(t)
	c.send(command("s1", "slow", ""))
	c.send(command("s2", "slow", ""))
	<-started
	<-started
	eventually(t, "status in flight 2", func() bool { return a.Status().InFlight == 2 })
	c.send(command("s3", "slow", ""))
	r := c.result(t) // answered while s1 and s2 still run
	wantCode(t, r, "s3", relay.CodeBusy)
	if !r.Error.Retryable {
		t.Error("busy must be retryable")
	}
	close(release)
	got := map[string]bool{}
	for range 2 {
		r := c.result(t)
		got[r.ID] = r.OK
	}
	if !got["s1"] || !got["s2"] {
		t.Errorf("results = %v", got)
	}
	eventually(t, "in flight 0", func() bool { return a.Status().InFlight == 0 })
	eventually(t, "3 audit records", func() bool { return len(audit.all()) == 3 })
}

func TestCancelAndDeadlineReachTheHandler(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	started := make(chan struct{}, 1)
	a.Register("wait", func(ctx context.Context, cmd *relay.Command) (any, error) {
		dl, ok := ctx.Deadline()
		if !ok || dl.After(cmd.Deadline.Add(time.Second)) {
			return nil, fmt.Errorf("ctx deadline %v (set %v), command deadline %v", dl, ok, cmd.Deadline)
		}
		started <- struct{}{}
		<-ctx.Done()
		return nil, ctx.Err()
	})
	var runs atomic.Int32
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)

	c.send(command("w1", "wait", ""))
	<-started
	c.send(&relay.Cancel{ID: "w1"})
	r := c.result(t)
	wantCode(t, r, "w1", relay.CodeInternal)
	if !strings.Contains(r.Error.Message, "cancelled by the hub") {
		t.Errorf("message = %q", r.Error.Message)
	}

	short := command("w2", "wait", "")
	short.Deadline = time.Now().Add(50 * time.Millisecond)
	c.send(short)
	wantCode(t, c.result(t), "w2", relay.CodeExpired)

	// A cancelled or timed-out command is stored like any other: not re-run.
	c.send(command("w1", "wait", ""))
	wantCode(t, c.result(t), "w1", relay.CodeInternal)
}

func TestHandlerErrorsAndPanics(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", func(c *Config) { c.MaxFrame = 4096 })
	a.Register("notfound", func(ctx context.Context, cmd *relay.Command) (any, error) {
		return nil, fmt.Errorf("reading room: %w", relay.Errorf(relay.CodeNotFound, "no room r1"))
	})
	a.Register("plain", func(ctx context.Context, cmd *relay.Command) (any, error) {
		return nil, errors.New("disk on fire")
	})
	a.Register("panic", func(ctx context.Context, cmd *relay.Command) (any, error) { panic("boom") })
	a.Register("huge", func(ctx context.Context, cmd *relay.Command) (any, error) {
		return strings.Repeat("x", 5000), nil
	})
	start(t, a)
	c := hub.next(t)
	for _, tc := range []struct {
		name string
		code relay.Code
		msg  string
	}{
		{"notfound", relay.CodeNotFound, "no room r1"},
		{"plain", relay.CodeInternal, "disk on fire"},
		{"panic", relay.CodeInternal, "panicked: boom"},
		{"huge", relay.CodeInternal, "frame limit"},
	} {
		c.send(command("id-"+tc.name, tc.name, ""))
		r := c.result(t)
		wantCode(t, r, "id-"+tc.name, tc.code)
		if !strings.Contains(r.Error.Message, tc.msg) {
			t.Errorf("%s: message %q, want %q", tc.name, r.Error.Message, tc.msg)
		}
	}
	// Still serving.
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
}

func TestDeadlinesUseTheHubClock(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	clk := newFakeClock()
	clk.JumpWall(-10 * time.Minute) // the device clock is 10 minutes slow
	var runs atomic.Int32
	a := newTestAgent(t, hub, "", func(c *Config) { c.Clock = clk })
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)
	eventually(t, "online", func() bool { return a.Status().State == StateOnline })
	// Past on the hub's clock, future on the device's: refused.
	late := command("late", "count", "")
	late.Deadline = time.Now().Add(-time.Minute)
	c.send(late)
	wantCode(t, c.result(t), "late", relay.CodeExpired)
	c.send(command("ok", "count", ""))
	if r := c.result(t); !r.OK {
		t.Errorf("result = %+v", r)
	}
	if runs.Load() != 1 {
		t.Errorf("runs = %d", runs.Load())
	}
}

func TestDedupeStorePrunes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newFakeClock()
	st, err := openDedupe(ctx, t.TempDir(), clk, time.Hour, 3, 1<<20)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for i := range 5 {
		cmd := command(fmt.Sprintf("c%d", i), "n", "")
		if _, err := st.markStarted(ctx, cmd); err != nil {
			t.Fatal(err)
		}
		if err := st.finish(ctx, cmd, &relay.Result{ID: cmd.ID, OK: true}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	unfinished := command("running", "n", "")
	st.markStarted(ctx, unfinished)
	if err := st.prune(ctx); err != nil {
		t.Fatal(err)
	}
	n, _ := st.count(ctx)
	if n != 4 { // the 3 newest finished + the unfinished one
		t.Errorf("after count prune: %d entries, want 4", n)
	}
	if e, _ := st.lookup(ctx, "c0"); e != nil {
		t.Error("oldest entry survived the count limit")
	}
	if e, _ := st.lookup(ctx, "c4"); e == nil || e.Result == nil || !e.Result.OK {
		t.Errorf("newest entry = %+v", e)
	}
	clk.Advance(2 * time.Hour)
	if err := st.prune(ctx); err != nil {
		t.Fatal(err)
	}
	if n, _ := st.count(ctx); n != 0 {
		t.Errorf("after the TTL: %d entries, want 0", n)
	}
}

func TestDedupeStoreSizeLimit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clk := newFakeClock()
	st, err := openDedupe(ctx, t.TempDir(), clk, time.Hour, 1000, 1000)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	big := []byte(`"` + strings.Repeat("x", 400) + `"`)
	for i := range 5 {
		cmd := command(fmt.Sprintf("c%d", i), "n", "")
		st.markStarted(ctx, cmd)
		if err := st.finish(ctx, cmd, &relay.Result{ID: cmd.ID, OK: true, Result: big}); err != nil {
			t.Fatal(err)
		}
		clk.Advance(time.Second)
	}
	st.prune(ctx)
	if n, _ := st.count(ctx); n != 2 { // ~430 bytes each, 1000-byte budget
		t.Errorf("%d entries, want 2", n)
	}
}

// TestReusedIDWithOtherArgsConflicts: the stored result of read_room(A)
// must not answer read_room(B) under the same id; the same arguments with
// other whitespace are the same command.
func TestReusedIDWithOtherArgsConflicts(t *testing.T) {
	t.Parallel()
	hub := newTestHub(t)
	var runs atomic.Int32
	a := newTestAgent(t, hub, "", nil)
	a.Register("count", counting(&runs))
	start(t, a)
	c := hub.next(t)
	first := command("id-args", "count", "")
	first.Args = []byte(`{"room_id":"A"}`)
	c.send(first)
	if r := c.result(t); !r.OK {
		t.Fatalf("first: %+v", r.Error)
	}
	same := command("id-args", "count", "")
	same.Args = []byte(`{ "room_id" : "A" }`)
	c.send(same)
	if r := c.result(t); !r.OK || runs.Load() != 1 {
		t.Fatalf("same args, other whitespace: %+v, %d runs", r.Error, runs.Load())
	}
	other := command("id-args", "count", "")
	other.Args = []byte(`{"room_id":"B"}`)
	c.send(other)
	wantCode(t, c.result(t), "id-args", relay.CodeIdempotencyConflict)
	if runs.Load() != 1 {
		t.Errorf("handler ran %d times", runs.Load())
	}
}

package notify

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// patience bounds every wait so a broken notifier fails the test instead of
// hanging it.
const patience = 20 * time.Second

func TestClean(t *testing.T) {
	for _, c := range []struct {
		in   string
		max  int
		want string
	}{
		{"Standup timer", 60, "Standup timer"},
		{"evil\u202egnp.exe\x1b[2J", 60, "evilgnp.exe[2J"},
		{"two\nlines\r\n\tand  tabs", 60, "two lines and tabs"},
		{"zero\u200bwidth\u2066iso\u2069", 60, "zerowidthiso"},
		{"bad\xffutf8\x00", 60, "badutf8"},
		{"  padded  ", 60, "padded"},
		{"line\u2028sep\u0085x", 60, "line sep x"},
		{"tag\U000E0041chars\ufeff", 60, "tagchars"},
		{strings.Repeat("é", 100), 10, strings.Repeat("é", 9) + "…"},
		{"ten chars!", 10, "ten chars!"},
		{"eleven char", 10, "eleven ch…"},
		{strings.Repeat("a", 8) + " bcdefg", 10, strings.Repeat("a", 8) + "…"},
	} {
		got := Clean(c.in, c.max)
		if got != c.want {
			t.Errorf("Clean(%q, %d) = %q, want %q", c.in, c.max, got, c.want)
		}
		if utf8.RuneCountInString(got) > c.max || !utf8.ValidString(got) {
			t.Errorf("Clean(%q, %d) = %q: over the bound or invalid", c.in, c.max, got)
		}
	}
}

func TestNoteText(t *testing.T) {
	s, b := Note{Room: "Kitchen", App: "Timer"}.Text()
	if s != "Proposal waiting: “Timer” for room “Kitchen”" {
		t.Errorf("summary %q", s)
	}
	if !strings.Contains(b, "“Timer”") || !strings.Contains(b, "“Kitchen”") || !strings.HasSuffix(b, "Review: roomrelay review --web") || strings.Contains(b, " by ") {
		t.Errorf("body %q", b)
	}
	_, b = Note{Room: strings.Repeat("r", 500), App: strings.Repeat("a", 500), From: strings.Repeat("f", 500)}.Text()
	if n := utf8.RuneCountInString(b); n > 2*maxName+maxFrom+120 {
		t.Errorf("body of %d runes from long names: not bounded", n)
	}
	if !strings.HasSuffix(b, ReviewCommand) {
		t.Errorf("long names pushed the review command out: %q", b)
	}
}

// recorder is a Notifier that records notes and fails with err when set.
type recorder struct {
	mu    sync.Mutex
	notes []Note
	err   error
	block chan struct{}
	got   chan struct{}
}

func newRecorder() *recorder { return &recorder{got: make(chan struct{}, 64)} }

func (r *recorder) Notify(ctx context.Context, n Note) error {
	if r.block != nil {
		select {
		case <-r.block:
		case <-ctx.Done():
			r.got <- struct{}{}
			return ctx.Err()
		}
	}
	r.mu.Lock()
	r.notes = append(r.notes, n)
	err := r.err
	r.mu.Unlock()
	r.got <- struct{}{}
	return err
}

func (r *recorder) wait(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-r.got:
		case <-time.After(patience):
			t.Fatal("the notifier was not called")
		}
	}
}

func logger(w *testutil.SyncBuffer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// TestQueueWarnsOncePerCause: a device without a desktop fails every note
// the same way; that is one warning, not one per proposal. Another cause
// gets its own.
func TestQueueWarnsOncePerCause(t *testing.T) {
	var logs testutil.SyncBuffer
	r := newRecorder()
	r.err = fmt.Errorf("%w: connect: no such file", ErrUnavailable)
	q := NewQueue(QueueConfig{Notifier: r, Logger: logger(&logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	defer func() { cancel(); <-done }()
	for i := range 3 {
		q.Post(Note{ProposalID: fmt.Sprint("prop_", i)})
	}
	r.wait(t, 3)
	r.mu.Lock()
	r.err = fmt.Errorf("%w: Notify: org.example.Broken", ErrFailed)
	r.mu.Unlock()
	q.Post(Note{ProposalID: "prop_3"})
	q.Post(Note{ProposalID: "prop_4"})
	r.wait(t, 2)
	// Errors of no known kind are told apart by their text.
	for i, e := range []string{"exec: osascript: boom", "exec: osascript: boom", "exec: osascript: bang"} {
		waitLog(t, &logs, fmt.Sprint("prop_", 4+i))
		r.mu.Lock()
		r.err = errors.New(e)
		r.mu.Unlock()
		q.Post(Note{ProposalID: fmt.Sprint("prop_", 5+i)})
		r.wait(t, 1)
	}
	waitLog(t, &logs, "prop_7")
	out := logs.String()
	if n := strings.Count(out, "level=WARN"); n != 4 {
		t.Errorf("%d warnings for 8 failures of 4 causes, want 4:\n%s", n, out)
	}
	if !strings.Contains(out, "no desktop notification service") || !strings.Contains(out, "org.example.Broken") ||
		!strings.Contains(out, "boom") || !strings.Contains(out, "bang") {
		t.Errorf("the warnings do not name the causes:\n%s", out)
	}
}

// TestQueueTimesOut: a notifier that hangs is cut off after the timeout,
// logged as such, and the next note still goes out.
func TestQueueTimesOut(t *testing.T) {
	var logs testutil.SyncBuffer
	r := newRecorder()
	r.block = make(chan struct{})
	q := NewQueue(QueueConfig{Notifier: r, Timeout: 50 * time.Millisecond, Logger: logger(&logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	defer func() { cancel(); <-done }()
	q.Post(Note{ProposalID: "prop_slow"})
	r.wait(t, 1)
	waitLog(t, &logs, "prop_slow")
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "did not answer in time") {
		t.Errorf("timeout not logged as one:\n%s", out)
	}
	close(r.block)
	q.Post(Note{ProposalID: "prop_next"})
	r.wait(t, 1)
}

// TestQueueIsBoundedAndNeverBlocks: Post returns at once when the queue is
// full (dropping with a log line), and Run's goroutine ends with its
// context even while a note is being sent.
func TestQueueIsBoundedAndNeverBlocks(t *testing.T) {
	base := runtime.NumGoroutine()
	var logs testutil.SyncBuffer
	r := newRecorder()
	r.block = make(chan struct{}) // the first note hangs in Notify
	defer close(r.block)
	q := NewQueue(QueueConfig{Notifier: r, Size: 2, Timeout: time.Hour, Logger: logger(&logs)})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); q.Run(ctx) }()
	q.Post(Note{ProposalID: "prop_0"})
	testutil.Eventually(t, "the first note to be taken", func() bool { return len(q.ch) == 0 })
	if !q.Post(Note{ProposalID: "prop_1"}) || !q.Post(Note{ProposalID: "prop_2"}) {
		t.Fatal("a queue of 2 refused 2 notes")
	}
	if q.Post(Note{ProposalID: "prop_3"}) {
		t.Fatal("a full queue took a note")
	}
	if out := logs.String(); !strings.Contains(out, "queue full") || !strings.Contains(out, "prop_3") {
		t.Errorf("drop not logged:\n%s", out)
	}
	cancel()
	select {
	case <-done:
	case <-time.After(patience):
		t.Fatal("Run did not end with its context while a note was being sent")
	}
	if strings.Contains(logs.String(), "level=WARN msg=\"notify: desktop notification failed") {
		t.Errorf("shutdown logged as a failure:\n%s", logs.String())
	}
	testutil.Eventually(t, "goroutines back to baseline", func() bool { return runtime.NumGoroutine() <= base })
}

func waitLog(t *testing.T, logs *testutil.SyncBuffer, s string) {
	t.Helper()
	testutil.Eventually(t, "a log line with "+s, func() bool {
		return strings.Contains(logs.String(), "proposal="+s) && strings.Contains(logs.String(), "failed")
	})
}

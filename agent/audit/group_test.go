package audit

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"
)

// The kill test's child: it appends to the log in $RR_AUDIT_CHILD_DIR,
// grouped lines and durable ones mixed, says "done", and waits to be
// SIGKILLed with its last grouped lines not yet fsync'd.
const childEnv = "RR_AUDIT_CHILD_DIR"

func TestMain(m *testing.M) {
	if dir := os.Getenv(childEnv); dir != "" {
		os.Exit(child(dir))
	}
	os.Exit(m.Run())
}

func child(dir string) int {
	// A window far beyond the test: the last grouped lines are never
	// synced by the timer before the kill.
	l, err := Open(dir, Options{SyncWindow: time.Hour})
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	for i := range 40 {
		e := entry(i)
		if i%10 == 9 {
			_, err = l.Append(e)
		} else {
			_, err = l.AppendGrouped(e)
		}
		if err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	for i := range 5 {
		if _, err := l.AppendGrouped(entry(100 + i)); err != nil {
			fmt.Println("error", err)
			return 1
		}
	}
	fmt.Println("done")
	select {}
}

// TestGroupedLinesSurviveKill: a grouped line is in the file when
// AppendGrouped returns, so kill -9 loses none, and the chain verifies;
// the head record lagging behind the unsynced lines is accepted, and the
// next Open continues the chain after all of them.
func TestGroupedLinesSurviveKill(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "done\n" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("child said %q (%v)", line, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	go io.Copy(io.Discard, out)
	cmd.Wait()

	head, ok, err := readHead(dir)
	if err != nil || !ok {
		t.Fatalf("head: %v %v", ok, err)
	}
	if head.seq != 40 {
		t.Errorf("head counts seq %d; want 40, the last durable Append (grouped lines after it were not synced)", head.seq)
	}
	rep, err := Verify(dir)
	if err != nil || !rep.OK() {
		t.Fatalf("verify after kill -9: %+v %v", rep.Problems, err)
	}
	if rep.Lines != 45 {
		t.Errorf("verify saw %d lines, want 45: a grouped line was lost to kill -9", rep.Lines)
	}
	l := openLog(t, dir, Options{})
	e, err := l.Append(entry(200))
	if err != nil || e.Seq != 46 {
		t.Fatalf("append after reopen: seq %d, %v", e.Seq, err)
	}
}

// TestHeadNeverAheadOfTheDisk: a power cut loses what was not fsync'd.
// Simulated by cutting the file back to its size at the last durable
// append: the chain still verifies (no "lines removed from the end"),
// because the head record only ever counts synced lines.
func TestHeadNeverAheadOfTheDisk(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{SyncWindow: time.Hour})
	for i := range 3 {
		if _, err := l.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	cur := filepath.Join(dir, CurrentFile)
	fi, err := os.Stat(cur)
	if err != nil {
		t.Fatal(err)
	}
	durable := fi.Size()
	for i := range 5 {
		if _, err := l.AppendGrouped(entry(10 + i)); err != nil {
			t.Fatal(err)
		}
	}
	// The "disk after the power cut": a copy of the directory with the
	// unsynced tail gone.
	cut := t.TempDir()
	for _, name := range []string{CurrentFile, HeadFile} {
		b, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		if name == CurrentFile {
			if int64(len(b)) <= durable {
				t.Fatalf("grouped lines not in the file (%d bytes, %d durable)", len(b), durable)
			}
			b = b[:durable]
		}
		if err := os.WriteFile(filepath.Join(cut, name), b, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	rep, err := Verify(cut)
	if err != nil || !rep.OK() || rep.Lines != 3 {
		t.Fatalf("after the simulated power cut: %d lines, %+v %v", rep.Lines, rep.Problems, err)
	}
	// Close makes the grouped lines durable and the head counts them.
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	head, _, err := readHead(dir)
	if err != nil || head.seq != 8 {
		t.Fatalf("head after Close: seq %d, %v; want 8", head.seq, err)
	}
}

// TestGroupSyncWithinTheWindow: with no durable append after it, a
// grouped line is made durable by the window's timer (the head record
// reaches it), without Close.
func TestGroupSyncWithinTheWindow(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{SyncWindow: time.Millisecond})
	if _, err := l.AppendGrouped(entry(1)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		head, _, err := readHead(dir)
		if err == nil && head.seq == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the grouped line was never synced: head %+v %v", head, err)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestConcurrentAppendsChain: durable and grouped appends from many
// goroutines make one unbroken chain, every seq once.
func TestConcurrentAppendsChain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{SyncWindow: time.Millisecond})
	var wg sync.WaitGroup
	seen := make([]bool, 401)
	var mu sync.Mutex
	for g := range 8 {
		wg.Go(func() {
			for i := range 50 {
				var e Entry
				var err error
				if (g+i)%3 == 0 {
					e, err = l.Append(entry(i))
				} else {
					e, err = l.AppendGrouped(entry(i))
				}
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if e.Seq > 400 || seen[e.Seq] {
					t.Errorf("seq %d twice or out of range", e.Seq)
				} else {
					seen[e.Seq] = true
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	rep, err := Verify(dir)
	if err != nil || !rep.OK() || rep.Lines != 400 {
		t.Fatalf("verify: %d lines, %+v %v", rep.Lines, rep.Problems, err)
	}
}

// TestFreshLogHasAHeadAtOnce: the first line of a fresh log, grouped or
// not, comes with a head record, so another process verifying meanwhile
// does not read "head missing: a removed tail cannot be ruled out"; and the
// log's own Verify makes grouped lines durable first.
func TestFreshLogHasAHeadAtOnce(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{SyncWindow: time.Hour})
	for i := range 3 {
		if _, err := l.AppendGrouped(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() || rep.Lines != 3 {
		t.Fatalf("another process's verify of a fresh log: %d lines, %+v %v", rep.Lines, rep.Problems, err)
	}
	rep, err := l.Verify()
	if err != nil || !rep.OK() {
		t.Fatalf("the log's own verify: %+v %v", rep.Problems, err)
	}
	if head, _, _ := readHead(dir); head.seq != 3 {
		t.Errorf("after the log's Verify the head counts seq %d, want 3", head.seq)
	}
}

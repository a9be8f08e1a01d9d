package audit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/relay"
)

func openLog(t *testing.T, dir string, opts Options) *Log {
	t.Helper()
	opts.Logger = slog.New(slog.DiscardHandler)
	l, err := Open(dir, opts)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func entry(i int) Entry {
	return Entry{CommandID: fmt.Sprintf("cmd-%03d", i), Project: []string{"alpha", "beta"}[i%2], Room: "room_1",
		Command: "read_room", Decision: Allowed, DurationMS: int64(i)}
}

// writeN appends n entries to a fresh log in a new directory and closes it.
func writeN(t *testing.T, n int, opts Options) string {
	t.Helper()
	dir := t.TempDir()
	l := openLog(t, dir, opts)
	for i := range n {
		if _, err := l.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return dir
}

func mustVerify(t *testing.T, dir string) Report {
	t.Helper()
	rep, err := Verify(dir)
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestAppendAndVerify(t *testing.T) {
	t.Parallel()
	dir := writeN(t, 10, Options{})
	rep := mustVerify(t, dir)
	if !rep.OK() || rep.Lines != 10 || rep.FirstSeq != 1 || rep.LastSeq != 10 {
		t.Fatalf("report = %+v", rep)
	}
	for _, name := range []string{CurrentFile, HeadFile} {
		info, err := os.Stat(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		// Mode bits exist on Unix only; on Windows the folder's ACL decides.
		if runtime.GOOS != "windows" && info.Mode().Perm() != 0o600 {
			t.Errorf("%s mode = %v, want 0600", name, info.Mode().Perm())
		}
	}
	// Each line is a JSON object with the documented fields, hash last.
	b, _ := os.ReadFile(filepath.Join(dir, CurrentFile))
	first := strings.SplitN(string(b), "\n", 2)[0]
	var m map[string]any
	if err := json.Unmarshal([]byte(first), &m); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"seq", "time", "command_id", "project", "room", "command", "decision", "duration_ms", "prev", "hash"} {
		if _, ok := m[k]; !ok {
			t.Errorf("line has no %q: %s", k, first)
		}
	}
	if !strings.Contains(first, `"prev":"","hash":"`) {
		t.Errorf("first line should chain to the empty anchor and end in its hash: %s", first)
	}

	// Reopening continues the chain.
	l := openLog(t, dir, Options{})
	e, err := l.Append(entry(10))
	if err != nil {
		t.Fatal(err)
	}
	if e.Seq != 11 || e.Prev != rep.LastHash {
		t.Errorf("after reopen: seq %d prev %s, want 11 and %s", e.Seq, e.Prev, rep.LastHash)
	}
	if rep := mustVerify(t, dir); !rep.OK() || rep.LastSeq != 11 {
		t.Errorf("after reopen: %+v", rep)
	}
}

// edit rewrites the current file with fn applied to its lines.
func edit(t *testing.T, dir string, fn func(lines []string) []string) {
	t.Helper()
	path := filepath.Join(dir, CurrentFile)
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	out := strings.Join(fn(lines), "\n")
	if len(out) > 0 {
		out += "\n"
	}
	if err := os.WriteFile(path, []byte(out), 0o600); err != nil {
		t.Fatal(err)
	}
}

func TestTamperDetection(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		tamper func(t *testing.T, dir string)
		kind   string
		line   int
	}{
		{"edit a field", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string {
				l[4] = strings.Replace(l[4], `"decision":"allowed"`, `"decision":"denied"`, 1)
				return l
			})
		}, KindEdited, 5},
		{"edit whitespace only", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { l[2] = strings.Replace(l[2], `,"project"`, `, "project"`, 1); return l })
		}, KindEdited, 3},
		{"edit and re-hash", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string {
				e, _, _ := parseLine([]byte(l[3]))
				e.Project = "gamma"
				line, _, _ := encode(e)
				l[3] = strings.TrimSuffix(string(line), "\n")
				return l
			})
		}, KindEdited, 5}, // line 4 now verifies by itself; the break shows at line 5
		{"delete a line", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { return append(l[:2], l[3:]...) })
		}, KindRemoved, 3},
		{"delete the first line", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { return l[1:] })
		}, KindRemoved, 1},
		{"swap two lines", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { l[5], l[6] = l[6], l[5]; return l })
		}, KindReordered, 6},
		{"move a line to the end", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string {
				moved := l[1]
				return append(append(l[:1:1], l[2:]...), moved)
			})
		}, KindReordered, 2},
		{"delete the last line", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { return l[:len(l)-1] })
		}, KindMissingTail, 10},
		{"delete the last three lines", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { return l[:len(l)-3] })
		}, KindMissingTail, 8},
		{"truncate mid-line", func(t *testing.T, dir string) {
			path := filepath.Join(dir, CurrentFile)
			info, _ := os.Stat(path)
			if err := os.Truncate(path, info.Size()-20); err != nil {
				t.Fatal(err)
			}
		}, KindTruncated, 10},
		{"empty the file", func(t *testing.T, dir string) {
			if err := os.Truncate(filepath.Join(dir, CurrentFile), 0); err != nil {
				t.Fatal(err)
			}
		}, KindMissingTail, 1},
		{"replace a line with junk", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { l[7] = "hello"; return l })
		}, KindMalformed, 8},
		{"duplicate a line", func(t *testing.T, dir string) {
			edit(t, dir, func(l []string) []string { return append(l[:4], append([]string{l[3]}, l[4:]...)...) })
		}, KindReordered, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := writeN(t, 10, Options{})
			if rep := mustVerify(t, dir); !rep.OK() {
				t.Fatalf("before tampering: %v", rep.Problems)
			}
			c.tamper(t, dir)
			rep := mustVerify(t, dir)
			if rep.OK() {
				t.Fatal("tampering not detected")
			}
			for _, p := range rep.Problems {
				t.Log(p)
			}
			p := rep.Problems[0]
			if p.Kind != c.kind || p.Line != c.line || p.File != CurrentFile {
				t.Errorf("first problem = %v, want %s at %s line %d (all: %v)", p, c.kind, CurrentFile, c.line, rep.Problems)
			}
		})
	}
}

// TestReopenAfterTamperKeepsEvidence removes the last lines, reopens the log
// (as the agent would on restart) and appends: the removal must still show.
func TestReopenAfterTamperKeepsEvidence(t *testing.T) {
	t.Parallel()
	dir := writeN(t, 10, Options{})
	edit(t, dir, func(l []string) []string { return l[:8] })
	l := openLog(t, dir, Options{})
	if _, err := l.Append(entry(99)); err != nil {
		t.Fatal(err)
	}
	rep, err := l.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if rep.OK() {
		t.Fatal("removal forgotten after reopen and append")
	}
	p := rep.Problems[0]
	if p.Kind != KindResumed || p.Line != 9 || !strings.Contains(p.Detail, "2 line(s) removed") {
		t.Errorf("problem = %v, want a resume note at line 9 naming 2 removed lines", p)
	}
}

// TestCrashRepair: a torn last line without a matching head (the process
// died inside the write) is cut on Open, silently, and the log verifies.
func TestCrashRepair(t *testing.T) {
	t.Parallel()
	dir := writeN(t, 5, Options{})
	f, err := os.OpenFile(filepath.Join(dir, CurrentFile), os.O_WRONLY|os.O_APPEND, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString(`{"seq":6,"time":"2026-`)
	f.Close()
	if rep := mustVerify(t, dir); rep.OK() || rep.Problems[0].Kind != KindTruncated || rep.Problems[0].Line != 6 {
		t.Fatalf("torn line: %v", rep.Problems)
	}
	l := openLog(t, dir, Options{})
	if e, err := l.Append(entry(5)); err != nil || e.Seq != 6 {
		t.Fatalf("append after repair = %d, %v", e.Seq, err)
	}
	if rep := mustVerify(t, dir); !rep.OK() || rep.LastSeq != 6 {
		t.Errorf("after repair: %+v", rep)
	}

	// A head one line behind (a crash between the line and the head write)
	// is accepted too.
	l.Close()
	head, _ := os.ReadFile(filepath.Join(dir, HeadFile))
	l2 := openLog(t, dir, Options{})
	if _, err := l2.Append(entry(6)); err != nil {
		t.Fatal(err)
	}
	l2.Close()
	os.WriteFile(filepath.Join(dir, HeadFile), head, 0o600)
	if rep := mustVerify(t, dir); !rep.OK() {
		t.Errorf("head one behind: %v", rep.Problems)
	}
	l3 := openLog(t, dir, Options{})
	if e, err := l3.Append(entry(7)); err != nil || e.Seq != 8 {
		t.Fatalf("append = %d, %v", e.Seq, err)
	}
	if rep := mustVerify(t, dir); !rep.OK() {
		t.Errorf("after reopen with a lagging head: %v", rep.Problems)
	}
}

func TestRotationKeepsVerifying(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	// ~250-byte lines, 2 KiB files: a rotation every 8 lines or so.
	l := openLog(t, dir, Options{MaxBytes: 2048, Keep: 3})
	for i := range 100 {
		if _, err := l.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
		if i%9 == 0 {
			if rep, err := l.Verify(); err != nil || !rep.OK() {
				t.Fatalf("after %d appends: %v %v", i+1, err, rep.Problems)
			}
		}
	}
	rep := mustVerify(t, dir)
	if !rep.OK() {
		t.Fatalf("problems: %v", rep.Problems)
	}
	if len(rep.Files) != 3 || rep.Files[2] != CurrentFile {
		t.Errorf("files = %v, want 2 rotated and the current one", rep.Files)
	}
	if rep.LastSeq != 100 || rep.AnchorSeq == 0 || rep.FirstSeq != rep.AnchorSeq+1 || rep.Lines != int(rep.LastSeq-rep.AnchorSeq) {
		t.Errorf("report = %+v", rep)
	}
	for _, f := range rep.Files {
		info, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if info.Size() > 2048 {
			t.Errorf("%s is %d bytes, over the 2048 bound", f, info.Size())
		}
	}
	// Query sees exactly the kept lines.
	all, err := l.Query(Filter{})
	if err != nil || len(all) != rep.Lines {
		t.Errorf("Query = %d entries, %v; want %d", len(all), err, rep.Lines)
	}
	l.Close()

	// Reopen continues across the rotated files.
	l2 := openLog(t, dir, Options{MaxBytes: 2048, Keep: 3})
	if e, err := l2.Append(entry(100)); err != nil || e.Seq != 101 {
		t.Fatalf("append after reopen = %d, %v", e.Seq, err)
	}

	// Tampering inside a rotated file is found there.
	rot := rep.Files[1]
	path := filepath.Join(dir, rot)
	b, _ := os.ReadFile(path)
	lines := bytes.Split(bytes.TrimSuffix(b, []byte("\n")), []byte("\n"))
	lines[2] = bytes.Replace(lines[2], []byte(`"project":"`), []byte(`"project":"x`), 1)
	os.WriteFile(path, append(bytes.Join(lines, []byte("\n")), '\n'), 0o600)
	rep2 := mustVerify(t, dir)
	if rep2.OK() || rep2.Problems[0].File != rot || rep2.Problems[0].Line != 3 || rep2.Problems[0].Kind != KindEdited {
		t.Errorf("edit in %s line 3: %v", rot, rep2.Problems)
	}

	// Removing the oldest kept file is found.
	os.WriteFile(path, b, 0o600)
	os.Remove(filepath.Join(dir, rep.Files[0]))
	rep3 := mustVerify(t, dir)
	if rep3.OK() || rep3.Problems[0].Kind != KindMissingFile {
		t.Errorf("oldest file removed: %v", rep3.Problems)
	}
}

func TestRotationLeftoverIsIgnored(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxBytes: 1024, Keep: 2})
	for i := range 30 {
		if _, err := l.Append(entry(i)); err != nil {
			t.Fatal(err)
		}
	}
	l.Close()
	// A crash after the manifest moved but before the old file was deleted
	// leaves an old file behind: simulate it with a file older than the anchor.
	os.WriteFile(filepath.Join(dir, rotatedName(1)), []byte("old\n"), 0o600)
	rep := mustVerify(t, dir)
	if !rep.OK() || len(rep.StaleFiles) != 1 {
		t.Errorf("report = %+v", rep)
	}
}

func TestConcurrentAppends(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l := openLog(t, dir, Options{MaxBytes: 16 << 10, Keep: 100, NoSync: true})
	const workers, each = 8, 50
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if _, err := l.Append(entry(w*each + i)); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	rep, err := l.Verify()
	if err != nil {
		t.Fatal(err)
	}
	if !rep.OK() || rep.Lines != workers*each || rep.LastSeq != workers*each {
		t.Fatalf("report: lines %d last %d problems %v", rep.Lines, rep.LastSeq, rep.Problems)
	}
	all, err := l.Query(Filter{})
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, e := range all {
		if seen[e.CommandID] {
			t.Errorf("command %s logged twice", e.CommandID)
		}
		seen[e.CommandID] = true
	}
	if len(seen) != workers*each {
		t.Errorf("%d distinct commands, want %d", len(seen), workers*each)
	}
}

func TestQuery(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	l := openLog(t, dir, Options{})
	for i := range 10 {
		e := entry(i)
		e.Time = base.Add(time.Duration(i) * time.Minute)
		if _, err := l.Append(e); err != nil {
			t.Fatal(err)
		}
	}
	cases := []struct {
		f    Filter
		want []string
	}{
		{Filter{Project: "beta"}, []string{"cmd-001", "cmd-003", "cmd-005", "cmd-007", "cmd-009"}},
		{Filter{Since: base.Add(7 * time.Minute)}, []string{"cmd-007", "cmd-008", "cmd-009"}},
		{Filter{Project: "alpha", Since: base.Add(3 * time.Minute)}, []string{"cmd-004", "cmd-006", "cmd-008"}},
		{Filter{Limit: 2}, []string{"cmd-008", "cmd-009"}},
		{Filter{Project: "gamma"}, nil},
	}
	for _, c := range cases {
		got, err := Query(dir, c.f)
		if err != nil {
			t.Fatal(err)
		}
		var ids []string
		for _, e := range got {
			ids = append(ids, e.CommandID)
		}
		if strings.Join(ids, ",") != strings.Join(c.want, ",") {
			t.Errorf("Query(%+v) = %v, want %v", c.f, ids, c.want)
		}
	}
}

func TestFromCommand(t *testing.T) {
	t.Parallel()
	cmd := &relay.Command{ID: "c1", ProjectID: "alpha", Name: "list_room_apps", Args: json.RawMessage(`{"room_id":"room_7","limit":5}`)}
	cases := []struct {
		res      *relay.Result
		decision Decision
		code     string
	}{
		{&relay.Result{ID: "c1", OK: true}, Allowed, ""},
		{&relay.Result{ID: "c1", Error: relay.Errorf(relay.CodeNotFound, "x")}, Allowed, "not_found"},
		{&relay.Result{ID: "c1", Error: relay.Errorf(relay.CodeCommandNotAllowed, "x")}, Denied, "command_not_allowed"},
		{&relay.Result{ID: "c1", Error: relay.Errorf(relay.CodeProjectNotEnabled, "x")}, Denied, "project_not_enabled"},
		{&relay.Result{ID: "c1", Error: relay.Errorf(relay.CodeRateLimited, "x")}, Denied, "rate_limited"},
	}
	for _, c := range cases {
		e := FromCommand(cmd, c.res, 1500*time.Microsecond)
		if e.Decision != c.decision || e.ErrorCode != c.code || e.Room != "room_7" || e.Project != "alpha" ||
			e.Command != "list_room_apps" || e.CommandID != "c1" || e.DurationMS != 1 {
			t.Errorf("FromCommand(%v) = %+v", c.res.Error, e)
		}
	}
}

func BenchmarkAppend(b *testing.B) {
	for _, sync := range []bool{true, false} {
		b.Run(fmt.Sprintf("fsync=%v", sync), func(b *testing.B) {
			l, err := Open(b.TempDir(), Options{NoSync: !sync, Logger: slog.New(slog.DiscardHandler)})
			if err != nil {
				b.Fatal(err)
			}
			defer l.Close()
			e := entry(1)
			b.ReportAllocs()
			for b.Loop() {
				if _, err := l.Append(e); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// TestAppendClipsFields: a megabyte id cannot bloat the log (and push its
// history out through rotation): every field is cut to its bound, saying
// how long it was, and the line still verifies.
func TestAppendClipsFields(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	l, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	big := strings.Repeat("é", 1<<19) // 1 MiB of two-byte runes
	e, err := l.Append(Entry{CommandID: big, Project: big, Room: big, Command: big, Decision: Denied, ErrorCode: big, Detail: big + big})
	if err != nil {
		t.Fatal(err)
	}
	for name, v := range map[string]string{"command_id": e.CommandID, "project": e.Project, "room": e.Room, "command": e.Command, "error_code": e.ErrorCode} {
		if len(v) > MaxIDBytes || !utf8.ValidString(v) || !strings.HasSuffix(v, "…(1048576 bytes)") {
			t.Errorf("%s: %d bytes, %q…", name, len(v), v[:min(20, len(v))])
		}
	}
	if len(e.Detail) > MaxDetailBytes {
		t.Errorf("detail: %d bytes", len(e.Detail))
	}
	l.Close()
	fi, err := os.Stat(filepath.Join(dir, CurrentFile))
	if err != nil {
		t.Fatal(err)
	}
	if fi.Size() > 4096 {
		t.Errorf("one clipped line takes %d bytes", fi.Size())
	}
	if rep, err := Verify(dir); err != nil || !rep.OK() {
		t.Fatalf("verify: %+v %v", rep.Problems, err)
	}
}

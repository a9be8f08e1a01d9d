package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/sandbox"
)

const testProposer = `MCP client token "standup-bot" (ct_3f9a)`

// reviewHome makes a --home with a local store holding two pending
// proposals (the example standup timer and a small one).
func reviewHome(t *testing.T) (home string, timer, small rooms.Proposal) {
	t.Helper()
	ctx := context.Background()
	home = t.TempDir()
	p, _ := device.ResolvePaths(home, func(string) string { return "" })
	if err := p.MkdirAll(); err != nil {
		t.Fatal(err)
	}
	s, err := rooms.Open(ctx, filepath.Join(p.Data, daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := s.CreateProject(ctx, "proj-a", "A"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: "proj-a", Name: "Standup"}); err != nil {
		t.Fatal(err)
	}
	files, err := sandbox.ReadSnippetDir(filepath.Join("..", "examples", "standup-timer"))
	if err != nil {
		t.Fatal(err)
	}
	propose := func(name string, files map[string]string) rooms.Proposal {
		pr, _, err := s.CreateProposal(ctx, rooms.NewProposal{ProjectID: "proj-a", RoomID: "room-1", Kind: rooms.SourceSnippet,
			Name: name, Files: files, IdempotencyKey: relay.SnippetKey("room-1", name, files), ProposedBy: testProposer})
		if err != nil {
			t.Fatal(err)
		}
		return pr
	}
	timer = propose("Standup timer", files)
	small = propose("Small", map[string]string{"src/App.tsx": "export default function App(){return null}\x1b[2K"})
	return home, timer, small
}

func TestReviewCommands(t *testing.T) {
	t.Parallel()
	home, timer, small := reviewHome(t)
	env := map[string]string{"ROOMRELAY_HOME": home}

	code, out, errs := run(t, env, "review", "list")
	if code != ExitOK || !strings.Contains(out, timer.ID) || !strings.Contains(out, small.ID) {
		t.Fatalf("list: %d %s %s", code, out, errs)
	}
	code, out, _ = run(t, env, "review", "list", "--json")
	var ps struct{ Proposals []rooms.Proposal }
	if code != ExitOK || json.Unmarshal([]byte(out), &ps) != nil || len(ps.Proposals) != 2 {
		t.Fatalf("list --json: %d %s", code, out)
	}

	code, out, _ = run(t, env, "review", "show", timer.ID)
	if code != ExitOK || !strings.Contains(out, "Review all proposed files (2)") || !strings.Contains(out, timer.ContentHash) {
		t.Fatalf("show: %d\n%s", code, out)
	}
	if !strings.Contains(out, "\nProposed by   "+testProposer+"\n") ||
		!strings.Contains(out, "\nArrived       "+timer.CreatedAt.UTC().Format("2006-01-02 15:04:05 UTC")+"\n") {
		t.Errorf("show lacks who proposed it and when:\n%s", out)
	}
	if strings.Contains(out, "WARNING") {
		t.Errorf("a clean proposal has a hidden-character warning:\n%s", out)
	}
	app, _ := os.ReadFile(filepath.Join("..", "examples", "standup-timer", "src", "App.tsx"))
	css, _ := os.ReadFile(filepath.Join("..", "examples", "standup-timer", "src", "styles.css"))
	for _, c := range [][]byte{app, css} {
		if len(c) == 0 || !strings.Contains(out, string(c)) {
			t.Fatalf("show does not print a file in full")
		}
	}
	if !strings.Contains(out, "src/App.tsx ("+itoa(len(app))+" bytes") {
		t.Errorf("show lacks the file size:\n%s", out)
	}
	// A terminal escape in a file is shown, not executed.
	code, out, _ = run(t, env, "review", "show", small.ID)
	if code != ExitOK || strings.Contains(out, "\x1b") || !strings.Contains(out, "⟨U+001B⟩[2K") {
		t.Fatalf("show with an escape: %q", out)
	}
	// ... and named in a banner before the files.
	banner := strings.Index(out, "!! WARNING  Hidden characters")
	if banner < 0 || banner > strings.Index(out, "Review all proposed files") ||
		!strings.Contains(out, "\n!!   src/App.tsx: 1 control character (U+001B)\n") {
		t.Errorf("show lacks the hidden-character banner:\n%s", out)
	}

	// Approval binds to the hash: another hash is refused, nothing changes.
	code, _, errs = run(t, env, "review", "approve", timer.ID, "--hash", small.ContentHash)
	if code != ExitFailure || !strings.Contains(errs, "not approved") {
		t.Fatalf("approve with another hash: %d %s", code, errs)
	}
	code, out, _ = run(t, env, "review", "list")
	if !strings.Contains(out, timer.ID) {
		t.Fatalf("refused approval changed the list:\n%s", out)
	}
	code, out, errs = run(t, env, "review", "approve", timer.ID, "--hash", timer.ContentHash)
	if code != ExitOK || !strings.Contains(out, timer.ContentHash) || !strings.Contains(out, "in the launcher") {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	code, _, errs = run(t, env, "review", "approve", timer.ID, "--hash", timer.ContentHash)
	if code != ExitFailure || !strings.Contains(errs, "no longer pending") {
		t.Fatalf("approve twice: %d %s", code, errs)
	}
	code, out, _ = run(t, env, "review", "decline", small.ID)
	if code != ExitOK || !strings.Contains(out, "declined") {
		t.Fatalf("decline: %d %s", code, out)
	}
	code, out, _ = run(t, env, "review", "list")
	if code != ExitOK || !strings.Contains(out, "No proposals wait") {
		t.Fatalf("list after decisions: %s", out)
	}
	code, out, _ = run(t, env, "review", "list", "--all")
	if code != ExitOK || !strings.Contains(out, "approved") || !strings.Contains(out, "declined") {
		t.Fatalf("list --all: %s", out)
	}

	// The launcher holds the approved app only.
	p, _ := device.ResolvePaths(home, func(string) string { return "" })
	s, err := rooms.Open(context.Background(), filepath.Join(p.Data, daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.ListRoomApps(context.Background(), "proj-a", "room-1", 50, "")
	if err != nil || len(page.Items) != 1 || page.Items[0].Name != "Standup timer" {
		t.Fatalf("launcher: %+v %v", page.Items, err)
	}

	code, _, _ = run(t, env, "review", "show")
	if code != ExitUsage {
		t.Errorf("show without an id: %d", code)
	}
	// A fresh device: list has nothing to show (exit 0, like rooms list);
	// naming a proposal there is an error that says why.
	fresh := map[string]string{"ROOMRELAY_HOME": t.TempDir()}
	if code, out, errs := run(t, fresh, "review", "list"); code != ExitOK || !strings.Contains(out, "No proposals wait for review.") {
		t.Errorf("list on a fresh device: %d %q %s", code, out, errs)
	}
	if code, out, _ := run(t, fresh, "review", "list", "--json"); code != ExitOK || !strings.Contains(out, `"proposals": []`) {
		t.Errorf("list --json on a fresh device: %d %q", code, out)
	}
	code, _, errs = run(t, fresh, "review", "show", "prop-1")
	if code != ExitFailure || !strings.Contains(errs, "no local Room store") {
		t.Errorf("show on a fresh device: %d %s", code, errs)
	}
}

// tty is standard input at a terminal, holding what the owner types.
type tty struct{ io.Reader }

func (tty) IsTerminal() bool { return true }

// runIn is run with stdin.
func runIn(t *testing.T, env map[string]string, stdin io.Reader, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &Env{Stdin: stdin, Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

func launcherApps(t *testing.T, home string) int {
	t.Helper()
	p, _ := device.ResolvePaths(home, func(string) string { return "" })
	s, err := rooms.Open(context.Background(), filepath.Join(p.Data, daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	page, err := s.ListRoomApps(context.Background(), "proj-a", "room-1", 50, "")
	if err != nil {
		t.Fatal(err)
	}
	return len(page.Items)
}

// TestReviewApproveAtATerminal: without --hash, at a terminal, approve
// shows every file in full and asks; only y or yes approves.
func TestReviewApproveAtATerminal(t *testing.T) {
	t.Parallel()
	home, timer, _ := reviewHome(t)
	env := map[string]string{"ROOMRELAY_HOME": home}
	app, _ := os.ReadFile(filepath.Join("..", "examples", "standup-timer", "src", "App.tsx"))
	css, _ := os.ReadFile(filepath.Join("..", "examples", "standup-timer", "src", "styles.css"))
	const question = `Approve "Standup timer" for room proj-a/room-1? [y/N] `
	for _, tc := range []struct{ typed, why string }{
		{"n\n", `answer "n"`}, {"\n", "no answer"}, {"", "no answer"}, {"yes please\n", `answer "yes please"`}, {"ja\n", `answer "ja"`},
	} {
		code, out, errs := runIn(t, env, tty{strings.NewReader(tc.typed)}, "review", "approve", timer.ID)
		if code != ExitFailure || !strings.Contains(errs, question) || !strings.Contains(errs, "not approved ("+tc.why) ||
			!strings.Contains(errs, "nothing changed") {
			t.Errorf("typed %q: %d\n%s", tc.typed, code, errs)
		}
		if !strings.Contains(out, string(app)) || !strings.Contains(out, string(css)) || !strings.Contains(out, timer.ContentHash) {
			t.Errorf("typed %q: the files were not shown in full:\n%s", tc.typed, out)
		}
		if strings.Contains(out, "approved ") {
			t.Errorf("typed %q: %s", tc.typed, out)
		}
	}
	if n := launcherApps(t, home); n != 0 {
		t.Fatalf("declined at the prompt, yet %d apps", n)
	}
	code, out, errs := runIn(t, env, tty{strings.NewReader(" Y \n")}, "review", "approve", timer.ID)
	if code != ExitOK || !strings.Contains(out, "approved "+timer.ID) || !strings.Contains(out, timer.ContentHash) {
		t.Fatalf("answered y: %d\n%s\n%s", code, out, errs)
	}
	if n := launcherApps(t, home); n != 1 {
		t.Fatalf("approved at the prompt, yet %d apps", n)
	}
	// A decided proposal is not shown again for a yes.
	code, out, errs = runIn(t, env, tty{strings.NewReader("y\n")}, "review", "approve", timer.ID)
	if code != ExitFailure || !strings.Contains(errs, "no longer pending") || strings.Contains(errs, question) {
		t.Fatalf("approve twice at a terminal: %d %s %s", code, out, errs)
	}
}

// TestReviewApproveWithoutTerminal: a script must give the hash it
// reviewed; the refusal does not hand it one.
func TestReviewApproveWithoutTerminal(t *testing.T) {
	t.Parallel()
	home, timer, _ := reviewHome(t)
	env := map[string]string{"ROOMRELAY_HOME": home}
	for _, stdin := range []io.Reader{nil, strings.NewReader("y\n")} {
		code, out, errs := runIn(t, env, stdin, "review", "approve", timer.ID)
		if code != ExitUsage || !strings.Contains(errs, "without a terminal, give --hash HASH") ||
			strings.Contains(errs+out, timer.ContentHash) {
			t.Fatalf("no --hash, no terminal: %d %q %q", code, out, errs)
		}
	}
	if n := launcherApps(t, home); n != 0 {
		t.Fatalf("refused, yet %d apps", n)
	}
	code, out, errs := runIn(t, env, nil, "review", "approve", timer.ID, "--hash", timer.ContentHash)
	if code != ExitOK || !strings.Contains(out, "approved "+timer.ID) {
		t.Fatalf("with --hash: %d %s %s", code, out, errs)
	}
	if n := launcherApps(t, home); n != 1 {
		t.Fatalf("approved with --hash, yet %d apps", n)
	}
}

func TestIsTerminal(t *testing.T) {
	t.Parallel()
	if isTerminal(strings.NewReader("")) || isTerminal(nil) || isTerminal(tty{}) == false {
		t.Error("readers")
	}
	null, err := os.Open(os.DevNull)
	if err != nil {
		t.Fatal(err)
	}
	defer null.Close()
	if isTerminal(null) {
		t.Errorf("%s is taken for a terminal", os.DevNull)
	}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	if isTerminal(r) {
		t.Error("a pipe is taken for a terminal")
	}
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func TestSnippetKey(t *testing.T) {
	t.Parallel()
	dir := filepath.Join("..", "examples", "standup-timer")
	files, err := sandbox.ReadSnippetDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	want := relay.SnippetKey("room-1", "Standup timer", files)
	code, out, errs := run(t, nil, "snippet", "key", dir, "--room", "room-1", "--name", "Standup timer")
	if code != ExitOK || strings.TrimSpace(out) != want || !strings.HasPrefix(want, "snip-") {
		t.Fatalf("snippet key: %d %q %s (want %s)", code, out, errs, want)
	}
	// The same files given one by one give the same key.
	code, out, _ = run(t, nil, "snippet", "key", "--room", "room-1", "--name", "Standup timer",
		filepath.Join(dir, "src", "App.tsx"), filepath.Join(dir, "src", "styles.css"))
	if code != ExitOK || strings.TrimSpace(out) != want {
		t.Fatalf("snippet key from files: %q", out)
	}
	// Another name is another key.
	_, out, _ = run(t, nil, "snippet", "key", dir, "--room", "room-1", "--name", "Timer 2")
	if strings.TrimSpace(out) == want {
		t.Fatal("the name is not part of the key")
	}
	code, out, _ = run(t, nil, "snippet", "key", dir, "--room", "room-1", "--name", "Standup timer", "--json")
	var j struct {
		Key  string `json:"idempotency_key"`
		Hash string `json:"content_hash"`
	}
	if code != ExitOK || json.Unmarshal([]byte(out), &j) != nil || j.Key != want || j.Hash != relay.ContentHash(files) {
		t.Fatalf("--json: %s", out)
	}
	if code, _, _ := run(t, nil, "snippet", "key", dir); code != ExitUsage {
		t.Errorf("without --room/--name: %d", code)
	}
}

// TestReviewApproveInterruptedAtThePrompt: Ctrl-C while approve waits for
// an answer approves nothing.
func TestReviewApproveInterruptedAtThePrompt(t *testing.T) {
	t.Parallel()
	home, timer, _ := reviewHome(t)
	r, w := io.Pipe() // an owner who types nothing
	defer w.Close()
	var out, errb testutil.SyncBuffer
	e := &Env{Stdin: tty{r}, Stdout: &out, Stderr: &errb,
		Getenv: func(k string) string { return map[string]string{"ROOMRELAY_HOME": home}[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan int, 1)
	go func() { done <- Main(ctx, []string{"review", "approve", timer.ID}, e) }()
	for deadline := time.Now().Add(10 * time.Second); !strings.Contains(errb.String(), "[y/N]"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no question asked: %q", errb.String())
		}
	}
	cancel() // what the signal handler does on Ctrl-C
	if code := <-done; code != ExitFailure || !strings.Contains(errb.String(), "not approved: interrupted") {
		t.Fatalf("interrupted: %d %q", code, errb.String())
	}
	if n := launcherApps(t, home); n != 0 {
		t.Fatalf("interrupted, yet %d apps", n)
	}
}

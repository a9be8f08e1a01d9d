package rooms

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

func TestMain(m *testing.M) {
	// The kill -9 test re-executes this binary as a writer child.
	if path := os.Getenv(crashWriterEnv); path != "" {
		os.Exit(crashWriter(path))
	}
	// TestReadRoomSeesEveryCommit runs it as a writer in another process.
	if spec := os.Getenv(addAppEnv); spec != "" {
		os.Exit(addAppChild(spec))
	}
	os.Exit(m.Run())
}

func openAt(t *testing.T, path string) *Store {
	t.Helper()
	s, err := Open(t.Context(), path, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func newStore(t *testing.T) *Store {
	t.Helper()
	return openAt(t, filepath.Join(t.TempDir(), "rooms.db"))
}

// setupRoom creates project pid with one room and returns the room id.
func setupRoom(t *testing.T, s *Store, pid string) string {
	t.Helper()
	ctx := t.Context()
	if _, err := s.CreateProject(ctx, pid, "Project "+pid); err != nil {
		t.Fatal(err)
	}
	r, err := s.CreateRoom(ctx, NewRoom{ProjectID: pid, Name: "Standup"})
	if err != nil {
		t.Fatal(err)
	}
	return r.ID
}

func addSnippet(t *testing.T, s *Store, pid, room, name string) string {
	t.Helper()
	id, err := s.AddApp(t.Context(), NewApp{ProjectID: pid, RoomID: room, Name: name, Source: SourceSnippet,
		Files: map[string]string{"src/App.tsx": "export default function App() { return null }"}})
	if err != nil {
		t.Fatalf("AddApp %s: %v", name, err)
	}
	return id
}

func wantCode(t *testing.T, err error, code relay.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("err = nil, want %s", code)
	}
	var re *relay.Error
	if !errors.As(err, &re) || re.Code != code {
		t.Fatalf("err = %v, want code %s", err, code)
	}
}

func TestMigrationsIdempotentOnReopen(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "rooms.db")
	s, err := Open(ctx, path, nil)
	if err != nil {
		t.Fatal(err)
	}
	room := setupRoom(t, s, "p1")
	addSnippet(t, s, "p1", room, "Timer")
	v, err := s.Version(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if v != SchemaVersion() || v < 1 {
		t.Fatalf("version = %d, want %d", v, SchemaVersion())
	}
	s.Close()

	for i := range 2 {
		s := openAt(t, path)
		if v2, err := s.Version(ctx); err != nil || v2 != v {
			t.Fatalf("reopen %d: version = %d, %v; want %d", i, v2, err, v)
		}
		r, err := s.ReadRoom(ctx, "p1", room)
		if err != nil || r.AppCount != 1 {
			t.Fatalf("reopen %d: ReadRoom = %+v, %v; want the app kept", i, r, err)
		}
		if err := s.IntegrityCheck(ctx); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}

	info, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	// Mode bits exist on Unix only; on Windows the folder's ACL decides.
	if runtime.GOOS != "windows" && info.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, want 0600", info.Mode().Perm())
	}
}

func TestOpenRefusesNewerSchema(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rooms.db")
	s := openAt(t, path)
	if _, err := s.db.ExecContext(t.Context(), "PRAGMA user_version = 999"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	if s2, err := Open(t.Context(), path, nil); err == nil {
		s2.Close()
		t.Fatal("Open of a newer schema succeeded")
	}
}

func TestOpenPragmas(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	for pragma, want := range map[string]string{"journal_mode": "wal", "foreign_keys": "1", "busy_timeout": "10000", "synchronous": "2"} {
		var got string
		if err := s.db.QueryRowContext(ctx, "PRAGMA "+pragma).Scan(&got); err != nil {
			t.Fatal(err)
		}
		if got != want {
			t.Errorf("PRAGMA %s = %q, want %q", pragma, got, want)
		}
	}
}

func TestReads(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "p1")
	timer := addSnippet(t, s, "p1", room, "Timer")
	repo, err := s.AddApp(ctx, NewApp{ProjectID: "p1", RoomID: room, Name: "Board", Source: SourceRepo,
		RepositoryID: "repo_1", VersionID: "v7"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.SetBuildState(ctx, timer, Build{State: BuildFailed, Phase: "render", Summary: "TypeError at src/App.tsx:3:5"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetLauncherState(ctx, repo, LauncherHidden); err != nil {
		t.Fatal(err)
	}

	r, err := s.ReadRoom(ctx, "p1", room)
	if err != nil {
		t.Fatal(err)
	}
	if r != (RoomSummary{ID: room, Name: "Standup", Project: "p1", Kind: "local", AppCount: 2}) {
		t.Errorf("ReadRoom = %+v", r)
	}

	page, err := s.ListRoomApps(ctx, "p1", room, 50, "")
	if err != nil {
		t.Fatal(err)
	}
	want := []AppItem{
		{InstanceID: timer, Name: "Timer", Source: SourceSnippet, Launcher: Launcher{State: LauncherActive, Position: 1}},
		{InstanceID: repo, Name: "Board", Source: SourceRepo, Launcher: Launcher{State: LauncherHidden, Position: 2}},
	}
	if len(page.Items) != 2 || page.Items[0] != want[0] || page.Items[1] != want[1] || page.NextCursor != "" {
		t.Errorf("ListRoomApps = %+v, want %+v and no cursor", page, want)
	}

	st, err := s.ReadRoomAppStatus(ctx, "p1", room, timer)
	if err != nil {
		t.Fatal(err)
	}
	if st.Review.State != ReviewOwnerAdded || !st.Review.ReviewedAt.IsZero() ||
		st.Build.State != BuildFailed || st.Build.Phase != "render" || st.Build.CheckedAt.IsZero() ||
		st.Build.Summary != "TypeError at src/App.tsx:3:5" || st.Launcher.Position != 1 {
		t.Errorf("ReadRoomAppStatus = %+v", st)
	}
}

func TestReadErrors(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := t.Context()
	room := setupRoom(t, s, "pA")
	setupRoom(t, s, "pB")
	app := addSnippet(t, s, "pA", room, "Timer")

	cases := []struct {
		name string
		call func() error
		code relay.Code
	}{
		{"unknown room", func() error { _, err := s.ReadRoom(ctx, "pA", "room_nope"); return err }, relay.CodeNotFound},
		{"room of other project", func() error { _, err := s.ReadRoom(ctx, "pB", room); return err }, relay.CodeNotFound},
		{"list other project", func() error { _, err := s.ListRoomApps(ctx, "pB", room, 10, ""); return err }, relay.CodeNotFound},
		{"status other project", func() error { _, err := s.ReadRoomAppStatus(ctx, "pB", room, app); return err }, relay.CodeNotFound},
		{"unknown app", func() error { _, err := s.ReadRoomAppStatus(ctx, "pA", room, "app_nope"); return err }, relay.CodeNotFound},
		{"app in other room", func() error { _, err := s.ReadRoomAppStatus(ctx, "pA", "room_x", app); return err }, relay.CodeNotFound},
		{"limit 0", func() error { _, err := s.ListRoomApps(ctx, "pA", room, 0, ""); return err }, relay.CodeInvalidArgs},
		{"limit 51", func() error { _, err := s.ListRoomApps(ctx, "pA", room, 51, ""); return err }, relay.CodeInvalidArgs},
		{"bad cursor", func() error { _, err := s.ListRoomApps(ctx, "pA", room, 10, "!!"); return err }, relay.CodeInvalidArgs},
		{"cursor of other room", func() error {
			_, err := s.ListRoomApps(ctx, "pA", room, 10, encodeCursor("room_other", 1))
			return err
		}, relay.CodeInvalidArgs},
		{"files of unknown app", func() error { _, err := s.AppFiles(ctx, "pA", room, "app_nope"); return err }, relay.CodeNotFound},
		{"storage of unknown app", func() error { return s.SetAppStorage(ctx, "app_nope", "k", []byte("v")) }, relay.CodeNotFound},
		{"build of unknown app", func() error { return s.SetBuildState(ctx, "app_nope", Build{State: BuildOK}) }, relay.CodeNotFound},
		{"room in unknown project", func() error { _, err := s.CreateRoom(ctx, NewRoom{ProjectID: "pZ", Name: "x"}); return err }, relay.CodeNotFound},
		{"app in other project's room", func() error {
			_, err := s.AddApp(ctx, NewApp{ProjectID: "pB", RoomID: room, Name: "x", Source: SourceRepo, RepositoryID: "r", VersionID: "v"})
			return err
		}, relay.CodeNotFound},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { wantCode(t, c.call(), c.code) })
	}
}

func TestIntegrityCheckDetectsDamage(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "rooms.db")
	s := openAt(t, path)
	room := setupRoom(t, s, "p1")
	for i := range 200 {
		addSnippet(t, s, "p1", room, "app"+string(rune('a'+i%26)))
	}
	if err := s.IntegrityCheck(t.Context()); err != nil {
		t.Fatal(err)
	}
	// Checkpoint the WAL into the main file, then scribble over a page in the
	// middle of it.
	if _, err := s.db.ExecContext(t.Context(), "PRAGMA wal_checkpoint(TRUNCATE)"); err != nil {
		t.Fatal(err)
	}
	s.Close()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	info, _ := f.Stat()
	junk := make([]byte, 4096)
	for i := range junk {
		junk[i] = byte(i * 7)
	}
	if _, err := f.WriteAt(junk, info.Size()/2/4096*4096); err != nil {
		t.Fatal(err)
	}
	f.Close()
	s2, err := Open(t.Context(), path, nil)
	if err != nil {
		return // refusing to open a damaged file is also a detection
	}
	defer s2.Close()
	if err := s2.IntegrityCheck(t.Context()); err == nil {
		t.Fatal("IntegrityCheck passed on a damaged file")
	}
}

// TestIDsFollowThePolicyRule: the store refuses a project or room id the
// policy file could not name (a space, a slash, too long).
func TestIDsFollowThePolicyRule(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	for _, id := range []string{"bad id", "a/b", "-lead", strings.Repeat("p", 129)} {
		if _, err := s.CreateProject(ctx, id, "x"); relay.AsError(err).Code != relay.CodeInvalidArgs {
			t.Errorf("project %q: %v", id, err)
		}
	}
	if _, err := s.CreateProject(ctx, "p1", "P"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, NewRoom{ID: "room 1", ProjectID: "p1", Name: "x"}); relay.AsError(err).Code != relay.CodeInvalidArgs {
		t.Errorf("room id with a space: %v", err)
	}
	if _, err := s.CreateRoom(ctx, NewRoom{ID: "room-1@team", ProjectID: "p1", Name: "x"}); err != nil {
		t.Errorf("a valid room id: %v", err)
	}
}

func TestCreateRoomTwiceSaysSo(t *testing.T) {
	t.Parallel()
	s := newStore(t)
	ctx := context.Background()
	if _, err := s.CreateProject(ctx, "p1", "P"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateRoom(ctx, NewRoom{ID: "r1", ProjectID: "p1", Name: "x"}); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateRoom(ctx, NewRoom{ID: "r1", ProjectID: "p1", Name: "y"})
	if re := relay.AsError(err); re.Code != relay.CodeInvalidArgs || !strings.Contains(re.Message, `"r1" already exists`) {
		t.Fatalf("second room r1: %v", err)
	}
}

package rooms

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

const addAppEnv = "ROOMRELAY_ROOMS_ADD_APP"

// addAppChild is the child side of TestReadRoomSeesEveryCommit: it adds
// one app to the room spec names ("path|project|room") and exits.
func addAppChild(spec string) int {
	parts := strings.Split(spec, "|")
	if len(parts) != 3 {
		fmt.Fprintln(os.Stderr, "want path|project|room")
		return 2
	}
	ctx := context.Background()
	s, err := Open(ctx, parts[0], slog.New(slog.DiscardHandler))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer s.Close()
	if _, err := s.AddApp(ctx, NewApp{ProjectID: parts[1], RoomID: parts[2], Name: "from another process",
		Source: SourceRepo, RepositoryID: "r", VersionID: "v"}); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	return 0
}

// TestReadRoomSeesEveryCommit pins the read_room cache's promise: a commit
// that returned before read_room began is in its answer, whoever made it:
// this store, another connection to the file (a second store in this
// process, whose writes this store's generation does not count), or
// another process (as the CLI's `rooms create` or `review approve` beside a
// running daemon).
func TestReadRoomSeesEveryCommit(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("the wal-index is mapped on Unix only; elsewhere every read asks SQLite")
	}
	ctx := t.Context()
	path := filepath.Join(t.TempDir(), "rooms.db")
	s := openAt(t, path)
	other := openAt(t, path)
	room := setupRoom(t, s, "p1")
	if !s.rc.wal.mapped() {
		t.Fatal("the wal-index is not mapped: the cache is off and this test would prove nothing")
	}
	want := 0
	check := func(step string) {
		t.Helper()
		// Twice: the second read is answered from the cache.
		for range 2 {
			r, err := s.ReadRoom(ctx, "p1", room)
			if err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			if r.AppCount != want {
				t.Fatalf("%s: read_room says %d apps, want %d", step, r.AppCount, want)
			}
		}
		s.rc.mu.Lock()
		_, kept := s.rc.m[roomKey{"p1", room}]
		s.rc.mu.Unlock()
		if !kept {
			t.Fatalf("%s: the summary was not cached", step)
		}
	}
	check("fresh")
	for i := range 10 {
		addSnippet(t, s, "p1", room, fmt.Sprint("here ", i))
		want++
		check("after a write through this store")
		addSnippet(t, other, "p1", room, fmt.Sprint("other ", i))
		want++
		check("after a write through another connection")
	}
	if testing.Short() {
		return
	}
	for range 2 {
		cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), addAppEnv+"="+path+"|p1|"+room)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("writer process: %v\n%s", err, out)
		}
		want++
		check("after a write by another process")
	}
	// The other count: a proposal from another connection, then declined
	// through this store.
	p, _, err := other.CreateProposal(ctx, NewProposal{ProjectID: "p1", RoomID: room, Kind: SourceRepo, Name: "proposed", IdempotencyKey: "k1",
		RepositoryID: "r", VersionID: "v"})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReadRoom(ctx, "p1", room); err != nil || r.PendingProposals != 1 {
		t.Fatalf("after a proposal: %+v, %v; want 1 pending", r, err)
	}
	if _, err := s.DeclineProposal(ctx, p.ID); err != nil {
		t.Fatal(err)
	}
	if r, err := s.ReadRoom(ctx, "p1", room); err != nil || r.PendingProposals != 0 {
		t.Fatalf("after a decline: %+v, %v; want 0 pending", r, err)
	}
}

// TestRoomCacheIsBounded: past maxCachedRooms, summaries are read but not
// kept.
func TestRoomCacheIsBounded(t *testing.T) {
	t.Parallel()
	var c roomCache
	st := changeStamp{gen: 1}
	for i := range maxCachedRooms + 10 {
		c.put(st, roomKey{"p", fmt.Sprint(i)}, RoomSummary{ID: fmt.Sprint(i)})
	}
	if len(c.m) != maxCachedRooms {
		t.Fatalf("%d summaries kept, bound %d", len(c.m), maxCachedRooms)
	}
	if _, ok := c.get(st, roomKey{"p", "0"}); !ok {
		t.Fatal("a kept summary is not found under its stamp")
	}
	if _, ok := c.get(changeStamp{gen: 2}, roomKey{"p", "0"}); ok {
		t.Fatal("a summary is found under another stamp")
	}
}

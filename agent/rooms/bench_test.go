package rooms

import (
	"fmt"
	"path/filepath"
	"testing"
)

// Store-side cost of the reads, for the figures (the round trip
// through the hub adds the network and the dispatcher on top).
func BenchmarkReads(b *testing.B) {
	s, err := Open(b.Context(), filepath.Join(b.TempDir(), "rooms.db"), nil)
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	ctx := b.Context()
	if _, err := s.CreateProject(ctx, "p1", "p1"); err != nil {
		b.Fatal(err)
	}
	r, err := s.CreateRoom(ctx, NewRoom{ProjectID: "p1", Name: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	var last string
	for i := range 50 {
		last, err = s.AddApp(ctx, NewApp{ProjectID: "p1", RoomID: r.ID, Name: fmt.Sprint("app ", i), Source: SourceSnippet,
			Files: map[string]string{"src/App.tsx": "export default () => null"}})
		if err != nil {
			b.Fatal(err)
		}
	}
	b.Run("ReadRoom", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ReadRoom(ctx, "p1", r.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	// What a read costs when something was committed since the last one
	// (the summary cache misses).
	b.Run("ReadRoomAfterWrite", func(b *testing.B) {
		for b.Loop() {
			s.rc.wrote()
			if _, err := s.ReadRoom(ctx, "p1", r.ID); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("ListRoomApps50", func(b *testing.B) {
		for b.Loop() {
			p, err := s.ListRoomApps(ctx, "p1", r.ID, 50, "")
			if err != nil || len(p.Items) != 50 {
				b.Fatal(len(p.Items), err)
			}
		}
	})
	b.Run("ReadRoomAppStatus", func(b *testing.B) {
		for b.Loop() {
			if _, err := s.ReadRoomAppStatus(ctx, "p1", r.ID, last); err != nil {
				b.Fatal(err)
			}
		}
	})
}

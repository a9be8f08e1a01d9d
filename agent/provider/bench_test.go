package provider

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
)

// BenchmarkReadRoom compares read_room's data source: the desktop app over
// the provider websocket (a unix socket) and the builtin SQLite store.
func BenchmarkReadRoom(b *testing.B) {
	b.Run("app", func(b *testing.B) {
		ts := startServer(b, nil)
		connectApp(b, ts, allCaps, roomAnswer("Team room"))
		app := ts.App()
		ctx := context.Background()
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := app.ReadRoom(ctx, "p1", "r1"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("builtin", func(b *testing.B) {
		ctx := context.Background()
		st, err := rooms.Open(ctx, filepath.Join(b.TempDir(), "rooms.db"), nil)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		if _, err := st.CreateProject(ctx, "p1", "P"); err != nil {
			b.Fatal(err)
		}
		if _, err := st.CreateRoom(ctx, rooms.NewRoom{ID: "r1", ProjectID: "p1", Name: "Team room"}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for b.Loop() {
			if _, err := st.ReadRoom(ctx, "p1", "r1"); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAppGoneMidCall measures how long a call in flight takes to fail
// with app_not_running once the app closes its connection on receiving it
// (the target: within 100 ms). Only the call is timed.
func BenchmarkAppGoneMidCall(b *testing.B) {
	ts := startServer(b, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	for b.Loop() {
		b.StopTimer()
		connectApp(b, ts, allCaps, func(app *fakeApp, _ message) string {
			app.conn.Close()
			return ""
		})
		b.StartTimer()
		if _, err := ts.App().ReadRoom(ctx, "p1", "r1"); code(err) != relay.CodeAppNotRunning {
			b.Fatalf("err %v", err)
		}
	}
}

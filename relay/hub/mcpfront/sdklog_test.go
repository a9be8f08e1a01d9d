package mcpfront

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"
)

// recorder keeps every record at any level.
type recorder struct {
	mu   *sync.Mutex
	recs *[]slog.Record
}

func (r recorder) Enabled(context.Context, slog.Level) bool { return true }
func (r recorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	*r.recs = append(*r.recs, rec.Clone())
	return nil
}
func (r recorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r recorder) WithGroup(string) slog.Handler      { return r }

// TestToolCallLogsNoSDKInfo: a tool call over the stateless front logs one
// INFO line, the front's own tools/call; the go-sdk's per-request lines
// (connecting, connected, disconnected) are DEBUG.
func TestToolCallLogsNoSDKInfo(t *testing.T) {
	var mu sync.Mutex
	var recs []slog.Record
	fh := startFront(t, Config{Logger: slog.New(recorder{&mu, &recs})})
	cs := session(t, fh.url, fh.write)
	mu.Lock()
	recs = nil // the session's initialize and the setup
	mu.Unlock()
	if isErr, text := callTool(t, cs, ToolListLocalRooms, map[string]any{}); isErr {
		t.Fatal(text)
	}
	// A tools/call is the front's own (fastcall.go); tools/list is the
	// SDK's, which logs its per-request lines.
	if _, err := cs.ListTools(context.Background(), nil); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var info, debug []string
	for _, r := range recs {
		switch r.Level {
		case slog.LevelInfo:
			info = append(info, r.Message)
		case slog.LevelDebug:
			debug = append(debug, r.Message)
		}
	}
	if !slices.Equal(info, []string{"tools/call"}) {
		t.Errorf("INFO lines of one tool call and a tools/list: %q, want only the front's tools/call", info)
	}
	if !slices.Contains(debug, "server session connected") {
		t.Errorf("the go-sdk's per-request lines are not at DEBUG: %q", debug)
	}
}

package mcpfront

import (
	"context"
	"log/slog"
)

// sdkLogger is the logger the go-sdk gets. Its INFO lines are per request
// on a stateless server (connecting, connected, disconnected with an empty
// session id: three for every POST) and say nothing the front's own
// tools/call line does not, so they are DEBUG here; its warnings and
// errors stay as they are.
func sdkLogger(l *slog.Logger) *slog.Logger { return slog.New(demoteInfo{l.Handler()}) }

// demoteInfo logs INFO records at DEBUG.
type demoteInfo struct{ h slog.Handler }

func demote(l slog.Level) slog.Level {
	if l == slog.LevelInfo {
		return slog.LevelDebug
	}
	return l
}

func (d demoteInfo) Enabled(ctx context.Context, l slog.Level) bool {
	return d.h.Enabled(ctx, demote(l))
}

func (d demoteInfo) Handle(ctx context.Context, r slog.Record) error {
	r.Level = demote(r.Level)
	return d.h.Handle(ctx, r)
}

func (d demoteInfo) WithAttrs(as []slog.Attr) slog.Handler { return demoteInfo{d.h.WithAttrs(as)} }
func (d demoteInfo) WithGroup(name string) slog.Handler    { return demoteInfo{d.h.WithGroup(name)} }

package oauth

import (
	"bytes"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer is a log sink for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(substr string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), substr)
}

// TestRefusedRequestsLogBounded ("also seen" of #29): each request the
// store refuses logged one ERROR line, with no bound; now at most 20 a
// minute, the next line saying how many were dropped.
func TestRefusedRequestsLogBounded(t *testing.T) {
	var buf syncBuffer
	m := newMemAS(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&buf, nil)) })
	m.st.SetMaxBytes(TableTokens, 1) // every token write is refused: 503
	const n = 500
	for range n {
		req := httptest.NewRequest(http.MethodPost, PathToken, nil)
		w := httptest.NewRecorder()
		m.s.writeOAuthErr(w, req, unavailable("store the token", ErrFull))
		if w.Code != http.StatusServiceUnavailable {
			t.Fatalf("a store failure: %d", w.Code)
		}
	}
	got := buf.lines("oauth request failed")
	t.Logf("%d refused requests logged %d ERROR lines", n, got)
	if got > 20 {
		t.Fatalf("%d refused requests logged %d lines, want at most 20 a minute", n, got)
	}
	m.clock.advance(time.Minute)
	m.s.writeOAuthErr(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, PathToken, nil), errors.New("x"))
	if buf.lines("suppressed_before=480") != 1 {
		t.Fatalf("the next window's line does not count the dropped ones:\n%s", buf.b.String())
	}
}

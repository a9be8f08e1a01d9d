package oauth

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"
)

// authorizeFrom opens a consent page as if from addr; it returns the
// status and the request id the page carries.
func (m *memAS) authorizeFrom(client, addr string) (int, string) {
	v := url.Values{"response_type": {"code"}, "client_id": {client}, "redirect_uri": {"http://127.0.0.1/callback"},
		"code_challenge": {pkceS256(verifier)}, "code_challenge_method": {"S256"}}
	req := httptest.NewRequest(http.MethodGet, PathAuthorize+"?"+v.Encode(), nil)
	req.RemoteAddr = addr
	w := httptest.NewRecorder()
	m.s.serveAuthorize(w, req)
	return w.Code, form(w.Body.String())["req"]
}

// TestPendingRequestsBounded (#29.2): consent pages nobody acted on are
// bounded per client prefix (the oldest evicted) and in all (the oldest
// of the heaviest network block evicted): a flood of strangers' pages
// from one block leaves a known user's pending page alone.
func TestPendingRequestsBounded(t *testing.T) {
	m := newMemAS(t, nil)
	m.s.pending.capTotal = 64
	_, client := m.registerFrom("192.0.2.1:4000")
	if _, err := m.exchange(client, m.code(client)); err != nil {
		t.Fatal(err)
	}
	status, known := m.authorizeFrom(client, "192.0.2.1:4000")
	if status != 200 || known == "" {
		t.Fatalf("the known user's consent page: %d", status)
	}
	byStatus := map[int]int{}
	start := time.Now()
	n := 0
	for ; n < 3000 && time.Since(start) < 10*time.Second; n++ {
		code, _ := m.authorizeFrom(client, fmt.Sprintf("198.51.100.%d:4000", 1+n%200))
		byStatus[code]++
	}
	keys, _ := m.st.Keys(t.Context(), TableFlow, "r.")
	t.Logf("consent flood: %d pages from 200 addresses of one /24 in %v: %v; the flow table holds %d requests, %d bytes",
		n, time.Since(start).Round(time.Millisecond), byStatus, len(keys), m.st.Bytes(TableFlow))
	if len(keys) > 64 {
		t.Errorf("%d unacted requests stored, want at most 64", len(keys))
	}
	if _, _, err := getRec[pendingRec](t.Context(), m.st, requestKey(known)); err != nil {
		t.Fatalf("the known user's pending request was evicted by the flood: %v", err)
	}
	// One prefix keeps at most pendingPerPrefix: its oldest go first.
	var first string
	for i := range pendingPerPrefix + 1 {
		m.clock.advance(time.Second)
		if _, id := m.authorizeFrom(client, "203.0.113.9:4000"); i == 0 {
			first = id
		}
	}
	if _, _, err := getRec[pendingRec](t.Context(), m.st, requestKey(first)); !notFound(err) {
		t.Fatalf("a prefix's 9th page did not evict its oldest: %v", err)
	}
}

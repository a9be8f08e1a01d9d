package oauth

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The server's logic on the in-memory store: no NATS is started (the
// hub is built, never run). The NATS tests (oauth_test.go) and the
// cluster test (e2e/cluster) keep the real buckets.

type memAS struct {
	t     *testing.T
	s     *Server
	st    *MemStore
	clock *clock
}

func newMemAS(t *testing.T, mod func(*Config)) *memAS {
	t.Helper()
	h, err := hub.New(hub.Config{DataDir: t.TempDir(), AdminToken: admin, Heartbeat: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	ck := &clock{}
	st := NewMemStore(ck.now)
	cfg := Config{Hub: h, Store: st, PublicURL: "http://127.0.0.1:9", Now: ck.now}
	if mod != nil {
		mod(&cfg)
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return &memAS{t: t, s: s, st: st, clock: ck}
}

const memRedirect = "http://127.0.0.1:43123/callback"

// code stores an approved code for client (what the consent page's
// approval does) and returns it.
func (m *memAS) code(client string) string {
	m.t.Helper()
	code := newSecret(PrefixCode)
	rec := codeRec{Client: client, ClientName: "Test", RedirectURI: memRedirect, Challenge: pkceS256(verifier),
		Resource: m.s.resource, Approval: approval{Project: "p1", Scope: hubapi.ScopeWrite, By: "ap-1", Via: "approver"},
		ExpiresAt: m.clock.now().Add(time.Minute)}
	if err := createRec(context.Background(), m.st, codeKey(code), rec, 0); err != nil {
		m.t.Fatal(err)
	}
	return code
}

func (m *memAS) exchange(client, code string) (*tokenResponse, error) {
	return m.s.exchangeCode(context.Background(), client, code, memRedirect, verifier, "")
}

func (m *memAS) grant(id string) *grantRec {
	m.t.Helper()
	g, _, err := getRec[grantRec](context.Background(), m.st, grantKey(id))
	if err != nil {
		m.t.Fatalf("the grant: %v", err)
	}
	return g
}

func oauthCode(err error) errCode {
	var oe *oauthErr
	if errors.As(err, &oe) {
		return oe.code
	}
	return ""
}

// TestMemCodeReplayRevokes: a code works once; its replay revokes the
// grant the first exchange created, and that grant's access token stops.
func TestMemCodeReplayRevokes(t *testing.T) {
	m := newMemAS(t, nil)
	code := m.code("rrcl-a")
	if _, err := m.s.exchangeCode(t.Context(), "rrcl-b", code, memRedirect, verifier, ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("another client's exchange: %v", err)
	}
	tok, err := m.exchange("rrcl-a", code)
	if err != nil {
		t.Fatalf("the first exchange (a wrong client must not spend the code): %v", err)
	}
	c, err := m.s.VerifyAccess(t.Context(), tok.AccessToken)
	if err != nil || c.Project != "p1" {
		t.Fatalf("the access token: %+v %v", c, err)
	}
	if _, err := m.exchange("rrcl-a", code); oauthCode(err) != codeInvalidGrant || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("the replay: %v", err)
	}
	if g := m.grant(c.TokenID); !g.Revoked || g.RevokedWhy != "authorization code replayed" {
		t.Fatalf("the grant after a replay: %+v", g)
	}
	if _, err := m.s.VerifyAccess(t.Context(), tok.AccessToken); !errors.Is(err, hub.ErrBadClientToken) {
		t.Fatalf("the access token after a replay: %v", err)
	}
	// A wrong verifier spends the code.
	code = m.code("rrcl-a")
	if _, err := m.s.exchangeCode(t.Context(), "rrcl-a", code, memRedirect, strings.Repeat("x", 43), ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("a wrong verifier: %v", err)
	}
	if _, err := m.exchange("rrcl-a", code); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("the right verifier after a wrong one: %v", err)
	}
	// An expired code.
	code = m.code("rrcl-a")
	m.clock.advance(2 * time.Minute)
	if _, err := m.exchange("rrcl-a", code); oauthCode(err) != codeInvalidGrant || !strings.Contains(err.Error(), "expired") {
		t.Fatalf("an expired code: %v", err)
	}
}

// TestMemRefreshGrace: a rotated refresh token works again within the
// grace (clients race their own refreshes); after it, its reuse revokes
// the grant.
func TestMemRefreshGrace(t *testing.T) {
	m := newMemAS(t, func(c *Config) { c.RefreshGrace = time.Minute })
	tok, err := m.exchange("rrcl-a", m.code("rrcl-a"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	if _, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "rooms:read rooms:write rooms:bogus", ""); oauthCode(err) != codeInvalidScope {
		t.Fatalf("an unknown scope: %v", err)
	}
	if _, err := m.s.refresh(ctx, "rrcl-b", tok.RefreshToken, "", ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("another client: %v", err)
	}
	r1, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "rooms:read", "")
	if err != nil || r1.Scope != ScopeRead {
		t.Fatalf("a narrowing refresh (the refused ones must not spend the token): %+v %v", r1, err)
	}
	c, err := m.s.VerifyAccess(ctx, r1.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	m.clock.advance(30 * time.Second)
	if _, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "", ""); err != nil {
		t.Fatalf("a reuse inside the grace: %v", err)
	}
	m.clock.advance(time.Minute)
	if _, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "", ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("a reuse after the grace: %v", err)
	}
	if g := m.grant(c.TokenID); !g.Revoked || g.RevokedWhy != "refresh token reused after rotation" {
		t.Fatalf("the grant after a late reuse: %+v", g)
	}
	if _, err := m.s.VerifyAccess(ctx, r1.AccessToken); !errors.Is(err, hub.ErrBadClientToken) {
		t.Fatalf("the newest access token of a revoked grant: %v", err)
	}
	if _, err := m.s.refresh(ctx, "rrcl-a", r1.RefreshToken, "", ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("the newest refresh token of a revoked grant: %v", err)
	}
}

// revoke posts an RFC 7009 revocation to the server's handler.
func (m *memAS) revoke(tok string) int {
	m.t.Helper()
	req := httptest.NewRequest(http.MethodPost, PathRevoke, strings.NewReader(url.Values{"token": {tok}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	m.s.serveRevoke(w, req)
	return w.Code
}

// TestMemRevocation: RFC 7009 revocation of a refresh token revokes its
// grant, of an access token that token alone; the operator's revoke stops
// the grant.
func TestMemRevocation(t *testing.T) {
	m := newMemAS(t, nil)
	ctx := t.Context()
	a, err := m.exchange("rrcl-a", m.code("rrcl-a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.exchange("rrcl-a", m.code("rrcl-a"))
	if err != nil {
		t.Fatal(err)
	}
	if s := m.revoke(a.AccessToken); s != 200 {
		t.Fatalf("revoke an access token: %d", s)
	}
	if _, err := m.s.VerifyAccess(ctx, a.AccessToken); !errors.Is(err, hub.ErrBadClientToken) {
		t.Fatalf("a revoked access token: %v", err)
	}
	if _, err := m.s.refresh(ctx, "rrcl-a", a.RefreshToken, "", ""); err != nil {
		t.Fatalf("its grant's refresh token (only the access token was revoked): %v", err)
	}
	if s := m.revoke(b.RefreshToken); s != 200 {
		t.Fatalf("revoke a refresh token: %d", s)
	}
	if _, err := m.s.VerifyAccess(ctx, b.AccessToken); !errors.Is(err, hub.ErrBadClientToken) {
		t.Fatalf("the access token of a grant revoked through its refresh token: %v", err)
	}
	gs, err := m.s.Grants(ctx, "p1")
	if err != nil || len(gs) != 2 {
		t.Fatalf("grants: %v %v", gs, err)
	}
	for _, g := range gs {
		if g.Revoked {
			continue
		}
		if _, err := m.s.RevokeGrant(ctx, g.ID, "test"); err != nil {
			t.Fatal(err)
		}
	}
	if gs, _ := m.s.Grants(ctx, ""); gs[0].Revoked != true || gs[1].Revoked != true {
		t.Fatalf("after the operator's revoke: %+v", gs)
	}
	if s := m.revoke("rro_unknown"); s != 200 {
		t.Fatalf("an unknown token (RFC 7009 §2.2: 200): %d", s)
	}
}

// TestCutKeepsUTF8: a value quoted back into an error is cut between
// characters (it was cut inside one, an invalid UTF-8 answer).
func TestCutKeepsUTF8(t *testing.T) {
	for n := range 12 {
		if got := cut("ééééé", n); !utf8.ValidString(got) {
			t.Fatalf("cut at %d: %q is not UTF-8", n, got)
		}
	}
	if got := cut("abc", 3); got != "abc" {
		t.Fatalf("a short value: %q", got)
	}
}

// TestMemRotatedRecordLivesOnlyItsGrace (#29.4): a rotated refresh
// token's record lives no longer than its reuse grace (it lived the
// bucket's 90 days); a reuse after the grace still revokes the grant.
func TestMemRotatedRecordLivesOnlyItsGrace(t *testing.T) {
	m := newMemAS(t, func(c *Config) { c.RefreshGrace = time.Minute })
	ctx := t.Context()
	tok, err := m.exchange("rrcl-a", m.code("rrcl-a"))
	if err != nil {
		t.Fatal(err)
	}
	r1, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "", "")
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.s.VerifyAccess(ctx, r1.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	m.clock.advance(time.Minute + time.Second)
	keys, _ := m.st.Keys(ctx, TableTokens, "")
	var refresh []string
	for _, k := range keys {
		if !strings.HasPrefix(k, "a.") {
			refresh = append(refresh, k)
		}
	}
	if len(refresh) != 1 || refresh[0] != refreshKey(r1.RefreshToken).k {
		t.Fatalf("after the grace the tokens table holds %v, want only the live refresh token", refresh)
	}
	if _, err := m.s.refresh(ctx, "rrcl-a", tok.RefreshToken, "", ""); oauthCode(err) != codeInvalidGrant {
		t.Fatalf("a reuse after the grace: %v", err)
	}
	if g := m.grant(c.TokenID); !g.Revoked {
		t.Fatal("a reuse after the grace (its record gone) did not revoke the grant")
	}
}

// TestCallerNameSaysUnverified (#29 "also seen"): the name a
// self-registered client gave itself reached the owner's review card
// (the command's caller) as if verified.
func TestCallerNameSaysUnverified(t *testing.T) {
	m := newMemAS(t, nil)
	tok, err := m.exchange("rrcl-a", m.code("rrcl-a"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := m.s.VerifyAccess(t.Context(), tok.AccessToken)
	if err != nil {
		t.Fatal(err)
	}
	if c.Name != "unverified: Test" {
		t.Fatalf("the caller's name: %q", c.Name)
	}
}

package oauth

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The token endpoint (authorization_code with PKCE, refresh_token with
// rotation), revocation (RFC 7009) and access-token verification for the
// MCP front.

var verifierRe = regexp.MustCompile(`^[A-Za-z0-9._~-]{43,128}$`) // RFC 7636 §4.1

// serveToken answers POST /oauth/token.
func (s *Server) serveToken(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if ok, wait := s.tokLim.take(hub.ClientPrefix(s.hub.ClientAddr(r))); !ok {
		s.m.tokens.WithLabelValues("other", string(codeRateLimited)).Inc()
		s.rateLimited(w, wait, fmt.Sprintf("more than %d token requests a minute from this network (client prefix); retry later", tokenPerPrefix))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 16<<10)
	if err := r.ParseForm(); err != nil {
		s.writeOAuthErr(w, r, bad(codeInvalidRequest, "the body must be application/x-www-form-urlencoded"))
		return
	}
	if a := r.Header.Get("Authorization"); a != "" && !strings.HasPrefix(strings.ToLower(a), "basic ") {
		s.writeOAuthErr(w, r, bad(codeInvalidRequest, "send client_id in the body; this server has only public clients"))
		return
	}
	f := r.PostForm
	gt := f.Get("grant_type")
	var resp *tokenResponse
	var err error
	switch gt {
	case "authorization_code":
		resp, err = s.exchangeCode(r.Context(), f.Get("client_id"), f.Get("code"), f.Get("redirect_uri"), f.Get("code_verifier"), f.Get("resource"))
	case "refresh_token":
		resp, err = s.refresh(r.Context(), f.Get("client_id"), f.Get("refresh_token"), f.Get("scope"), f.Get("resource"))
	default:
		gt = "other"
		err = bad(codeUnsupportedGrantType, "grant_type must be authorization_code or refresh_token")
	}
	if err != nil {
		outcome := "unavailable"
		var oe *oauthErr
		if errors.As(err, &oe) {
			outcome = string(oe.code)
		}
		s.m.tokens.WithLabelValues(gt, outcome).Inc()
		s.writeOAuthErr(w, r, err)
		return
	}
	s.m.tokens.WithLabelValues(gt, "ok").Inc()
	w.Header().Set("Pragma", "no-cache")
	writeJSON(w, http.StatusOK, resp)
}

type tokenResponse struct {
	AccessToken  string `json:"access_token"`
	TokenType    string `json:"token_type"`
	ExpiresIn    int64  `json:"expires_in"`
	RefreshToken string `json:"refresh_token"`
	Scope        string `json:"scope"`
}

// exchangeCode redeems a code once. A replay revokes what the first
// exchange issued (RFC 6749 §4.1.2); a wrong client or redirect leaves the
// code for its rightful owner; a wrong verifier spends it.
func (s *Server) exchangeCode(ctx context.Context, clientID, code, redirect, verifier, resource string) (*tokenResponse, error) {
	if !strings.HasPrefix(code, PrefixCode) || len(code) > 100 {
		return nil, bad(codeInvalidGrant, "the code is not valid")
	}
	ck := codeKey(code)
	for range 4 {
		c, rev, err := getRec[codeRec](ctx, s.st, ck)
		if notFound(err) {
			return nil, bad(codeInvalidGrant, "the code is unknown or expired")
		}
		if err != nil {
			return nil, unavailable("read the code", err)
		}
		if c.Used {
			if c.Grant != "" {
				if err := s.revokeGrant(ctx, c.Grant, "authorization code replayed"); err != nil {
					return nil, err
				}
			}
			s.log.Warn("oauth code replayed; its grant is revoked", "client", c.Client, "grant", c.Grant)
			return nil, bad(codeInvalidGrant, "the code was already used; the tokens issued for it are revoked")
		}
		if s.cfg.Now().After(c.ExpiresAt) {
			return nil, bad(codeInvalidGrant, "the code expired; start the authorization again")
		}
		if clientID != c.Client {
			return nil, bad(codeInvalidGrant, "the code was issued to another client")
		}
		if redirect != c.RedirectURI {
			return nil, bad(codeInvalidGrant, "redirect_uri must be the one of the authorization request")
		}
		if resource != "" && !s.isResource(resource) {
			return nil, bad(codeInvalidTarget, "this server issues tokens only for the resource %s", s.resource)
		}
		c.Used = true
		ok := verifierRe.MatchString(verifier) && pkceS256(verifier) == c.Challenge
		if ok {
			c.Grant = newID("gr-")
		}
		if err := putRec(ctx, s.st, ck, c, rev); err != nil {
			if isConflict(err) {
				continue // another exchange got there first: now a replay
			}
			return nil, unavailable("spend the code", err)
		}
		if !ok {
			return nil, bad(codeInvalidGrant, "code_verifier does not match the code_challenge (S256); the code is spent")
		}
		now := s.cfg.Now().UTC()
		g := &grantRec{ID: c.Grant, Client: c.Client, ClientName: c.ClientName, Project: c.Approval.Project, Scope: c.Approval.Scope,
			Device: c.Approval.Device, ApprovedBy: c.Approval.By, ApprovedVia: c.Approval.Via, Resource: c.Resource, CreatedAt: now, LastUsed: now}
		resp, ah, rh, err := s.mint(ctx, g, g.Scope)
		if err != nil {
			return nil, err
		}
		g.Access, g.Refresh = []string{ah}, []string{rh}
		if err := createRec(ctx, s.st, grantKey(g.ID), g, 0); err != nil {
			if isConflict(err) { // a replay revoked it meanwhile
				return nil, bad(codeInvalidGrant, "the code was used twice; the tokens are revoked")
			}
			return nil, unavailable("store the grant", err)
		}
		s.clientSignedIn(ctx, g.Client)
		s.log.Info("oauth grant created", "grant", g.ID, "client", g.Client, "project", g.Project, "scope", g.Scope, "via", g.ApprovedVia)
		return resp, nil
	}
	return nil, bad(codeInvalidGrant, "the code was used concurrently")
}

func pkceS256(verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// mint stores a new access and refresh token for g with scope and returns
// the response and the two key suffixes.
func (s *Server) mint(ctx context.Context, g *grantRec, scope string) (*tokenResponse, string, string, error) {
	now := s.cfg.Now().UTC()
	at, rt := newSecret(PrefixAccess), newRefreshToken(g.ID)
	ah, rh := hashSecret("access", at), hashSecret("refresh", rt)
	// Each record lives as long as its token, not the bucket's 90 days.
	if err := createRec(ctx, s.st, accessKeyOf(ah), accessRec{Grant: g.ID, Scope: scope, Audience: s.resource, ExpiresAt: now.Add(s.cfg.AccessTTL)}, s.cfg.AccessTTL); err != nil {
		return nil, "", "", unavailable("store the token", err)
	}
	if err := createRec(ctx, s.st, refreshKeyOf(rh), refreshRec{Grant: g.ID, Scope: scope, IssuedAt: now, ExpiresAt: now.Add(s.cfg.RefreshTTL)}, s.cfg.RefreshTTL); err != nil {
		return nil, "", "", unavailable("store the token", err)
	}
	return &tokenResponse{AccessToken: at, TokenType: "Bearer", ExpiresIn: int64(s.cfg.AccessTTL / time.Second),
		RefreshToken: rt, Scope: mcpScopes(scope)}, ah, rh, nil
}

// refresh rotates a refresh token: the old one works again only within
// the grace (clients race their own refreshes); a reuse after it revokes
// the grant. The scope may narrow, never widen. A rotated token's record
// lives only its grace (#29.4): the rotation deletes it and leaves a
// marker (x.) that expires with the grace; a reuse after that is known by
// the grant's list of its last rotated tokens.
func (s *Server) refresh(ctx context.Context, clientID, token, scopeParam, resource string) (*tokenResponse, error) {
	if !strings.HasPrefix(token, PrefixRefresh) || len(token) > 100 {
		return nil, bad(codeInvalidGrant, "the refresh token is not valid")
	}
	if resource != "" && !s.isResource(resource) {
		return nil, bad(codeInvalidTarget, "this server issues tokens only for the resource %s", s.resource)
	}
	hash := hashSecret("refresh", token)
	now := s.cfg.Now().UTC()
	// Every check comes before the rotation: a refused request (another
	// client, a wider scope) must not spend the token.
	rec, rev, err := getRec[refreshRec](ctx, s.st, refreshKeyOf(hash))
	if notFound(err) {
		rec, rev, err = s.rotatedRefresh(ctx, token, hash)
	}
	if err != nil {
		return nil, err
	}
	if now.After(rec.ExpiresAt) {
		return nil, bad(codeInvalidGrant, "the refresh token expired; authorize again")
	}
	g, _, err := getRec[grantRec](ctx, s.st, grantKey(rec.Grant))
	if notFound(err) {
		return nil, bad(codeInvalidGrant, "the grant of this refresh token is gone")
	}
	if err != nil {
		return nil, unavailable("read the grant", err)
	}
	if g.Revoked {
		return nil, bad(codeInvalidGrant, "the grant was revoked; authorize again")
	}
	if clientID != g.Client {
		return nil, bad(codeInvalidGrant, "the refresh token was issued to another client")
	}
	scope := g.Scope
	if scopeParam != "" {
		want, err := parseScope(scopeParam)
		if err != nil {
			return nil, err
		}
		if want == hubapi.ScopeWrite && g.Scope != hubapi.ScopeWrite {
			return nil, bad(codeInvalidScope, "the grant is read-only: a refresh cannot widen it; authorize again and choose read and propose")
		}
		scope = want
	}
	if g.Device != "" {
		if err := s.hub.DeviceActive(ctx, g.Device, g.Project); errors.Is(err, hub.ErrDeviceGone) {
			return nil, bad(codeInvalidGrant, "the device that approved this grant was revoked or left the project")
		} else if err != nil {
			return nil, err
		}
	}
	if ok, wait := s.grantLim.take(g.ID); !ok {
		return nil, &oauthErr{status: http.StatusTooManyRequests, code: codeRateLimited, wait: wait,
			desc: fmt.Sprintf("this grant refreshed more than %d times a minute; retry later", tokenPerGrant)}
	}
	// Rotate: the first use claims the rotation (an exclusive create of
	// the marker) and deletes the record; a use of a rotated token is a
	// reuse, fine within the grace, a theft signal after it.
	rotated := ""
	if rec.RotatedAt.IsZero() {
		err := createRec(ctx, s.st, rotatedKeyOf(hash), refreshRec{Grant: rec.Grant, Scope: rec.Scope, IssuedAt: rec.IssuedAt,
			ExpiresAt: rec.ExpiresAt, RotatedAt: now}, s.cfg.RefreshGrace)
		switch {
		case err == nil:
			rotated = hash
			_ = del(context.WithoutCancel(ctx), s.st, refreshKeyOf(hash), rev)
		case isConflict(err): // rotated concurrently
			x, _, err := getRec[refreshRec](ctx, s.st, rotatedKeyOf(hash))
			if err != nil {
				return nil, bad(codeInvalidGrant, "the refresh token is unknown, expired or revoked")
			}
			rec = x
		default:
			return nil, unavailable("rotate the refresh token", err)
		}
	}
	if !rec.RotatedAt.IsZero() && now.Sub(rec.RotatedAt) > s.cfg.RefreshGrace {
		return nil, s.refreshReused(ctx, g)
	}
	resp, ah, rh, err := s.mint(ctx, g, scope)
	if err != nil {
		return nil, err
	}
	var evicted []key
	if _, err := update(ctx, s.st, grantKey(g.ID), func(g *grantRec) error {
		if g.Revoked {
			return bad(codeInvalidGrant, "the grant was revoked; authorize again")
		}
		g.LastUsed = now
		var ea, ef []string
		g.Access, ea = keepNewest(append(g.Access, ah))
		g.Refresh, ef = keepNewest(append(g.Refresh, rh))
		if rotated != "" {
			g.Rotated, _ = keepNewest(append(g.Rotated, rotated))
		}
		for _, k := range ea {
			evicted = append(evicted, accessKeyOf(k))
		}
		for _, k := range ef {
			evicted = append(evicted, refreshKeyOf(k))
		}
		return nil
	}); err != nil {
		var oe *oauthErr
		if errors.As(err, &oe) {
			return nil, oe
		}
		return nil, unavailable("record the refresh", err)
	}
	for _, k := range evicted {
		_ = del(context.WithoutCancel(ctx), s.st, k, 0)
	}
	return resp, nil
}

// rotatedRefresh finds a refresh token whose record is gone: rotated
// within its grace (the x. marker), or rotated longer ago, which the
// grant named in the token remembers (its last maxLiveTokens rotations):
// that reuse revokes the grant.
func (s *Server) rotatedRefresh(ctx context.Context, token, hash string) (*refreshRec, uint64, error) {
	x, _, err := getRec[refreshRec](ctx, s.st, rotatedKeyOf(hash))
	if err == nil {
		return x, 0, nil
	}
	if !notFound(err) {
		return nil, 0, unavailable("read the refresh token", err)
	}
	unknown := bad(codeInvalidGrant, "the refresh token is unknown, expired or revoked")
	id, ok := refreshGrant(token)
	if !ok {
		return nil, 0, unknown
	}
	g, _, err := getRec[grantRec](ctx, s.st, grantKey(id))
	if notFound(err) {
		return nil, 0, unknown
	}
	if err != nil {
		return nil, 0, unavailable("read the grant", err)
	}
	if !slices.Contains(g.Rotated, hash) {
		return nil, 0, unknown
	}
	if g.Revoked {
		return nil, 0, bad(codeInvalidGrant, "the grant was revoked; authorize again")
	}
	return nil, 0, s.refreshReused(ctx, g)
}

// refreshReused revokes g: one of its refresh tokens was used again after
// its grace.
func (s *Server) refreshReused(ctx context.Context, g *grantRec) error {
	if err := s.revokeGrant(ctx, g.ID, "refresh token reused after rotation"); err != nil {
		return err
	}
	s.log.Warn("oauth refresh token reused after its grace; grant revoked", "grant", g.ID, "client", g.Client)
	return bad(codeInvalidGrant, "the refresh token was already used; the grant is revoked, authorize again")
}

// newRefreshToken is a refresh token that names its grant (rrf_<grant
// id's hex>.<secret>): a reuse after its record is gone still finds the
// grant to revoke.
func newRefreshToken(grant string) string {
	return PrefixRefresh + strings.TrimPrefix(grant, "gr-") + "." + newSecret("")
}

// refreshGrant is the grant a refresh token names, if it names one.
func refreshGrant(token string) (string, bool) {
	id, _, ok := strings.Cut(strings.TrimPrefix(token, PrefixRefresh), ".")
	if !ok || len(id) != 24 || strings.Trim(id, "0123456789abcdef") != "" {
		return "", false
	}
	return "gr-" + id, true
}

// keepNewest keeps the last maxLiveTokens entries and returns the rest.
func keepNewest(list []string) (kept, evicted []string) {
	if len(list) <= maxLiveTokens {
		return list, nil
	}
	n := len(list) - maxLiveTokens
	return slices.Clone(list[n:]), slices.Clone(list[:n])
}

// serveRevoke answers RFC 7009 revocation: a refresh token revokes its
// grant, an access token itself. Always 200, also for an unknown token.
func (s *Server) serveRevoke(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	if ok, wait := s.revLim.take(hub.ClientPrefix(s.hub.ClientAddr(r))); !ok {
		s.rateLimited(w, wait, "too many revocations from this network (client prefix); retry later")
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		s.writeOAuthErr(w, r, bad(codeInvalidRequest, "the body must be application/x-www-form-urlencoded"))
		return
	}
	tok := r.PostForm.Get("token")
	ctx := r.Context()
	switch {
	case strings.HasPrefix(tok, PrefixRefresh) && len(tok) < 100:
		rec, _, err := getRec[refreshRec](ctx, s.st, refreshKey(tok))
		if err == nil {
			err = s.revokeGrant(ctx, rec.Grant, "revoked by the client (RFC 7009)")
		} else if notFound(err) {
			err = nil
		}
		if err != nil {
			s.writeOAuthErr(w, r, err)
			return
		}
	case strings.HasPrefix(tok, PrefixAccess) && len(tok) < 100:
		// Only a token that exists is written (RFC 7009 §2.2: an unknown
		// one is a 200 and nothing else): a stranger's guesses write nothing.
		k := accessKey(tok)
		e, err := s.st.Get(ctx, k.t, k.k)
		if err == nil {
			err = del(ctx, s.st, k, e.Revision)
		}
		if err != nil && !notFound(err) && !isConflict(err) {
			s.writeOAuthErr(w, r, unavailable("revoke the token", err))
			return
		}
	}
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusOK)
}

// VerifyAccess returns who an access token speaks for, or
// hub.ErrBadClientToken (unknown, expired, for another resource, its
// grant revoked, or its device revoked). Two reads, like a client token:
// the token, then its grant.
func (s *Server) VerifyAccess(ctx context.Context, tok string) (*hub.Client, error) {
	if !strings.HasPrefix(tok, PrefixAccess) || len(tok) > 100 {
		return nil, hub.ErrBadClientToken
	}
	a, _, err := getRec[accessRec](ctx, s.st, accessKey(tok))
	if notFound(err) {
		return nil, hub.ErrBadClientToken
	}
	if err != nil {
		return nil, unavailable("check the token", err)
	}
	if s.cfg.Now().After(a.ExpiresAt) || subtle.ConstantTimeCompare([]byte(a.Audience), []byte(s.resource)) != 1 {
		return nil, hub.ErrBadClientToken
	}
	// The grant as the leader has it: a revocation made on another node a
	// moment ago holds here now (kvleader.go).
	g, _, err := getLatestRec[grantRec](ctx, s.st, grantKey(a.Grant))
	if notFound(err) {
		return nil, hub.ErrBadClientToken
	}
	if err != nil {
		return nil, unavailable("check the token", err)
	}
	if g.Revoked {
		return nil, hub.ErrBadClientToken
	}
	if g.Device != "" {
		if err := s.hub.DeviceActive(ctx, g.Device, g.Project); errors.Is(err, hub.ErrDeviceGone) {
			return nil, hub.ErrBadClientToken
		} else if err != nil {
			return nil, err
		}
	}
	s.noteGrantUse(ctx, g)
	return &hub.Client{TokenID: g.ID, Name: shownName(g), Project: g.Project, Scope: a.Scope, OAuth: true, Device: g.Device}, nil
}

// shownName is a grant's client as the device's owner reads it (the
// proposal's review card, the command's caller): a self-registered
// client's name is what it said of itself, and says so first (the caller
// is cut to relay.MaxCallerBytes, so the mark must not be what is cut); a
// client ID metadata document's was published on a host the operator
// allowed, which it names.
func shownName(g *grantRec) string {
	if u, err := url.Parse(g.Client); err == nil && u.Scheme == "https" {
		return relay.CutUTF8(relay.CutUTF8(g.ClientName, 60)+" (published at "+u.Host+")", 100)
	}
	return "unverified: " + relay.CutUTF8(g.ClientName, 80)
}

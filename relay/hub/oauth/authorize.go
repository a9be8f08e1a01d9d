package oauth

import (
	"context"
	"crypto/subtle"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The authorization endpoint and its consent page. Until the client and
// its redirect URI are verified every error is a local page, never a
// redirect (an open redirect otherwise); after, errors go back to the
// client with state and iss. Each request is bound to the browser that
// opened it by a cookie, and its form carries a CSRF token.

var (
	challengeRe = regexp.MustCompile(`^[A-Za-z0-9_-]{43}$`) // base64url SHA-256, no padding
	clientIDRe  = regexp.MustCompile(`^[A-Za-z0-9_-]{1,64}$`)
)

// serveAuthorize answers GET /oauth/authorize: the consent page.
func (s *Server) serveAuthorize(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	ctx := r.Context()
	if ok, wait := s.authLim.take(hub.ClientPrefix(s.hub.ClientAddr(r))); !ok {
		s.m.authorizations.WithLabelValues(string(codeRateLimited)).Inc()
		w.Header().Set("Retry-After", strconv.Itoa(int(wait/time.Second)+1))
		s.localError(w, http.StatusTooManyRequests, fmt.Sprintf("More than %d sign-in pages a minute were opened from this network. Wait a minute, then start again from your MCP client.", authorizePerPrefx))
		return
	}
	clientID := q.Get("client_id")
	var c *clientRec
	var err error
	if s.isCIMD(clientID) {
		if c, err = s.cimd.client(ctx, clientID); err != nil {
			s.m.authorizations.WithLabelValues("cimd_refused").Inc()
			s.logs.Log(slog.LevelWarn, "oauth client metadata document refused", "client", cut(clientID, 200), "err", err)
			s.localError(w, http.StatusBadRequest, "This sign-in link's client is a metadata document the hub refused: "+err.Error()+".")
			return
		}
	} else {
		// A registered client's id is a key token; anything else (a URL
		// while CIMD is off) is unknown, not a store failure.
		if !clientIDRe.MatchString(clientID) {
			err = ErrNotFound
		} else {
			c, _, err = getRec[clientRec](ctx, s.st, clientKey(clientID))
		}
		if notFound(err) {
			s.m.authorizations.WithLabelValues("unknown_client").Inc()
			s.localError(w, http.StatusBadRequest, "This sign-in link names a client the hub does not know. Start again from your MCP client (it registers itself again).")
			return
		}
		if err != nil {
			s.localError(w, http.StatusServiceUnavailable, "The hub could not reach its store. Retry in a moment.")
			return
		}
	}
	redirect := q.Get("redirect_uri")
	if redirect == "" && len(c.RedirectURIs) == 1 && !strings.HasPrefix(c.RedirectURIs[0], "http://") {
		redirect = c.RedirectURIs[0]
	}
	if !redirectMatches(c.RedirectURIs, redirect) {
		s.m.authorizations.WithLabelValues("bad_redirect").Inc()
		s.localError(w, http.StatusBadRequest, "The redirect address in this sign-in link is not one the client registered, so the hub will not send anything there.")
		return
	}
	// From here on errors go back to the client.
	fail := func(code errCode, desc string) {
		s.m.authorizations.WithLabelValues(string(code)).Inc()
		s.redirectError(w, r, redirect, q.Get("state"), code, desc)
	}
	switch {
	case q.Get("response_type") != "code":
		fail(codeUnsupportedResponseType, "response_type must be code")
		return
	case q.Get("code_challenge") == "":
		fail(codeInvalidRequest, "PKCE is required: send code_challenge with code_challenge_method=S256")
		return
	case q.Get("code_challenge_method") != "S256":
		fail(codeInvalidRequest, "code_challenge_method must be S256 (plain is refused, and a missing method means plain)")
		return
	case !challengeRe.MatchString(q.Get("code_challenge")):
		fail(codeInvalidRequest, "code_challenge must be the base64url SHA-256 of the verifier (43 characters)")
		return
	case len(q.Get("state")) > 512:
		fail(codeInvalidRequest, "state is longer than 512 bytes")
		return
	}
	resource := q.Get("resource")
	if resource == "" {
		resource = s.resource
	}
	if !s.isResource(resource) {
		fail(codeInvalidTarget, "this server issues tokens only for the resource "+s.resource)
		return
	}
	scope, err := parseScope(q.Get("scope"))
	if err != nil {
		fail(codeInvalidScope, err.(*oauthErr).desc)
		return
	}
	now := s.cfg.Now().UTC()
	browser := newSecret("")
	userCode := newUserCode()
	p := &pendingRec{ID: newID("rq-"), Client: c.ID, ClientName: c.Name, ClientHost: c.Host, RedirectURI: redirect, State: q.Get("state"),
		Challenge: q.Get("code_challenge"), Resource: s.resource, Scope: scope, BrowserHash: hashSecret("browser", browser),
		CSRF: newSecret(""), UserCodeHash: userCodeHash(userCode), Addr: s.hub.ClientAddr(r),
		UserAgent: cut(r.UserAgent(), 200), CreatedAt: now, ExpiresAt: now.Add(s.cfg.RequestTTL)}
	if err := s.storePending(ctx, p, userCode); err != nil {
		s.logs.Log(slog.LevelError, "oauth request not stored", "err", err)
		s.localError(w, http.StatusServiceUnavailable, "The hub could not store the request. Retry in a moment.")
		return
	}
	s.touchClient(ctx, c)
	http.SetCookie(w, s.cookie(reqCookie(p.ID), browser, s.cfg.RequestTTL))
	ap := s.approver(r)
	s.renderConsent(w, p, userCode, ap, "")
}

// isResource compares a requested resource with the canonical one (an
// empty path is "/"; otherwise exact).
func (s *Server) isResource(res string) bool {
	return res == s.resource || strings.TrimSuffix(res, "/") == s.resource
}

// touchClient rewrites a client's last use at most daily, which also
// restarts its age in the bucket (an unused client expires after 90 days).
// A registration that never signed in is left alone: a consent page
// anyone can open must not make it permanent (clients.go).
func (s *Server) touchClient(ctx context.Context, c *clientRec) {
	now := s.cfg.Now().UTC()
	if c.Host != "" || c.LastUsed.IsZero() || now.Sub(c.LastUsed) < 24*time.Hour { // a metadata document is not stored
		return
	}
	_, _ = update(context.WithoutCancel(ctx), s.st, clientKey(c.ID), func(c *clientRec) error {
		c.LastUsed = now
		return nil
	})
}

// redirectError sends an error back to a verified redirect URI, with iss
// (RFC 9207) and the client's state.
func (s *Server) redirectError(w http.ResponseWriter, r *http.Request, redirect, state string, code errCode, desc string) {
	v := url.Values{"error": {string(code)}, "error_description": {desc}, "iss": {s.issuer}}
	if state != "" {
		v.Set("state", state)
	}
	s.redirect(w, r, redirect, v)
}

func (s *Server) redirect(w http.ResponseWriter, r *http.Request, redirect string, v url.Values) {
	u, _ := url.Parse(redirect) // verified against the registration
	q := u.Query()
	for k, vs := range v {
		q[k] = vs
	}
	u.RawQuery = q.Encode()
	pageHeaders(w)
	http.Redirect(w, r, u.String(), http.StatusSeeOther)
}

// pageHeaders: no framing (clickjacking), no caching, no referrer.
func pageHeaders(w http.ResponseWriter) {
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	h.Set("Pragma", "no-cache")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self' http: https: cursor: vscode: vscode-insiders:; frame-ancestors 'none'; base-uri 'none'")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("X-Content-Type-Options", "nosniff")
}

// cookie is a host-only, HttpOnly, SameSite=Lax cookie; __Host- and
// Secure when the issuer is https (a plain-http issuer is loopback only).
func (s *Server) cookie(name, value string, ttl time.Duration) *http.Cookie {
	c := &http.Cookie{Name: name, Value: value, Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode, MaxAge: int(ttl / time.Second)}
	if s.secure {
		c.Name, c.Secure = "__Host-"+name, true
	}
	return c
}

func (s *Server) readCookie(r *http.Request, name string) string {
	if s.secure {
		name = "__Host-" + name
	}
	c, err := r.Cookie(name)
	if err != nil {
		return ""
	}
	return c.Value
}

func reqCookie(id string) string { return "rr_req_" + strings.TrimPrefix(id, "rq-")[:12] }

const sessionCookie = "rr_session"

// signedIn is the approver of the browser's session, if any.
type signedIn struct {
	rec *approverRec
}

// approver returns the signed-in approver, or nil.
func (s *Server) approver(r *http.Request) *signedIn {
	tok := s.readCookie(r, sessionCookie)
	if !strings.HasPrefix(tok, prefixSession) || len(tok) > 100 {
		return nil
	}
	sess, _, err := getRec[sessionRec](r.Context(), s.st, sessionKey(tok))
	if err != nil || s.cfg.Now().After(sess.ExpiresAt) {
		return nil
	}
	a, _, err := getRec[approverRec](r.Context(), s.st, approverKey(sess.Approver))
	if err != nil || a.Removed {
		return nil
	}
	return &signedIn{rec: a}
}

// loadPending reads a request and checks it belongs to this browser.
func (s *Server) loadPending(r *http.Request, id string) (*pendingRec, uint64, string) {
	if !strings.HasPrefix(id, "rq-") || len(id) != 27 {
		return nil, 0, "This approval page is not valid. Start again from your MCP client."
	}
	p, rev, err := getRec[pendingRec](r.Context(), s.st, requestKey(id))
	if err != nil || s.cfg.Now().After(p.ExpiresAt) {
		return nil, 0, "This approval request expired or is unknown. Start again from your MCP client."
	}
	got := hashSecret("browser", s.readCookie(r, reqCookie(id)))
	if subtle.ConstantTimeCompare([]byte(got), []byte(p.BrowserHash)) != 1 {
		return nil, 0, "This approval request was started in another browser (or its cookie is gone). Start again from your MCP client in this browser."
	}
	return p, rev, ""
}

// serveDecision answers the consent form's POST.
func (s *Server) serveDecision(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, 8<<10)
	if err := r.ParseForm(); err != nil {
		s.localError(w, http.StatusBadRequest, "The form could not be read.")
		return
	}
	// A cross-site form post (SameSite=Lax keeps the cookies off it in
	// browsers; this also refuses it outright).
	if o := r.Header.Get("Origin"); o != "" && o != "null" && o != s.issuer {
		s.m.authorizations.WithLabelValues("csrf").Inc()
		s.localError(w, http.StatusForbidden, "This form was posted from another site; nothing was approved.")
		return
	}
	p, rev, msg := s.loadPending(r, r.PostForm.Get("req"))
	if p == nil {
		s.m.authorizations.WithLabelValues("csrf").Inc()
		s.localError(w, http.StatusForbidden, msg)
		return
	}
	if subtle.ConstantTimeCompare([]byte(r.PostForm.Get("csrf")), []byte(p.CSRF)) != 1 {
		s.m.authorizations.WithLabelValues("csrf").Inc()
		s.localError(w, http.StatusForbidden, "The form's security token does not match this request; nothing was approved. Start again from your MCP client.")
		return
	}
	if p.Decided != statePending {
		s.localError(w, http.StatusConflict, "This request was already decided. Start again from your MCP client if you need to.")
		return
	}
	if r.PostForm.Get("action") != "approve" {
		if s.finish(w, r, p, rev, stateDone) {
			s.m.authorizations.WithLabelValues("denied").Inc()
			s.redirectError(w, r, p.RedirectURI, p.State, codeAccessDenied, "the approver denied the request")
		}
		return
	}
	ap := s.approver(r)
	if ap == nil {
		s.localError(w, http.StatusForbidden, "You are not signed in as an approver (or your session ended). Open your approver login link, then start again from your MCP client.")
		return
	}
	project := r.PostForm.Get("project")
	if !slices.Contains(ap.rec.Projects, project) {
		s.renderConsent(w, p, "", ap, "Choose one of your projects.")
		return
	}
	scope := hubapi.ScopeRead
	if r.PostForm.Get("access") == "write" {
		if p.Scope != hubapi.ScopeWrite || ap.rec.MaxScope != hubapi.ScopeWrite {
			s.renderConsent(w, p, "", ap, "Read and propose was not asked for, or is beyond what you may grant.")
			return
		}
		scope = hubapi.ScopeWrite
	}
	p.Approval = &approval{Project: project, Scope: scope, By: ap.rec.ID, Via: "approver"}
	if !s.finish(w, r, p, rev, stateDone) {
		return
	}
	s.issueCodeRedirect(w, r, p)
}

// finish marks a request decided (compare-and-set: a form posted twice
// issues one code); false means the answer was written.
func (s *Server) finish(w http.ResponseWriter, r *http.Request, p *pendingRec, rev uint64, state string) bool {
	p.Decided = state
	s.pending.acted(p.ID)
	if err := putRec(r.Context(), s.st, requestKey(p.ID), p, rev); err != nil {
		if isConflict(err) {
			s.localError(w, http.StatusConflict, "This request was already decided. Start again from your MCP client if you need to.")
			return false
		}
		s.localError(w, http.StatusServiceUnavailable, "The hub could not record the decision. Retry in a moment.")
		return false
	}
	return true
}

// issueCodeRedirect stores a code for an approved request and sends the
// browser back to the client with it.
func (s *Server) issueCodeRedirect(w http.ResponseWriter, r *http.Request, p *pendingRec) {
	code := newSecret(PrefixCode)
	rec := codeRec{Client: p.Client, ClientName: p.ClientName, RedirectURI: p.RedirectURI, Challenge: p.Challenge,
		Resource: p.Resource, Approval: *p.Approval, ExpiresAt: s.cfg.Now().UTC().Add(s.cfg.CodeTTL)}
	if err := createRec(r.Context(), s.st, codeKey(code), rec, 0); err != nil {
		s.localError(w, http.StatusServiceUnavailable, "The hub could not store the code. Start again from your MCP client.")
		return
	}
	s.m.authorizations.WithLabelValues("approved_" + p.Approval.Via).Inc()
	s.log.Info("oauth request approved", "client", p.Client, "project", p.Approval.Project, "scope", p.Approval.Scope,
		"via", p.Approval.Via, "by", p.Approval.By)
	v := url.Values{"code": {code}, "iss": {s.issuer}}
	if p.State != "" {
		v.Set("state", p.State)
	}
	http.SetCookie(w, s.cookie(reqCookie(p.ID), "", -1))
	s.redirect(w, r, p.RedirectURI, v)
}

// serveWait is the page the browser refreshes while the device's owner
// approves with `roomrelay oauth approve CODE`.
func (s *Server) serveWait(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	p, rev, msg := s.loadPending(r, q.Get("req"))
	if p == nil {
		s.localError(w, http.StatusForbidden, msg)
		return
	}
	switch p.Decided {
	case stateApproved:
		if s.finish(w, r, p, rev, stateDone) {
			s.issueCodeRedirect(w, r, p)
		}
	case stateDenied:
		if s.finish(w, r, p, rev, stateDone) {
			s.m.authorizations.WithLabelValues("denied").Inc()
			s.redirectError(w, r, p.RedirectURI, p.State, codeAccessDenied, "the device's owner denied the request")
		}
	case stateDone:
		s.localError(w, http.StatusConflict, "This request was already completed.")
	default:
		code := q.Get("code")
		if userCodeHash(code) != p.UserCodeHash {
			code = "" // the page shows the code only to whoever already has it
		}
		s.renderWait(w, p, code)
	}
}

// serveLogin redeems a one-time approver login link for a session cookie.
func (s *Server) serveLogin(w http.ResponseWriter, r *http.Request) {
	tok := r.URL.Query().Get("t")
	if !strings.HasPrefix(tok, PrefixLogin) || len(tok) > 100 {
		s.localError(w, http.StatusBadRequest, "This login link is not valid.")
		return
	}
	key := loginKey(tok)
	lr, rev, err := getRec[loginRec](r.Context(), s.st, key)
	if err != nil {
		s.localError(w, http.StatusBadRequest, "This login link is unknown, expired or already used. Ask the hub's operator for a new one (`roomrelay hub approver login-link`).")
		return
	}
	if s.cfg.Now().After(lr.ExpiresAt) {
		s.localError(w, http.StatusBadRequest, "This login link expired. Ask the hub's operator for a new one (`roomrelay hub approver login-link`).")
		return
	}
	// Single use: delete only the revision read, so two redemptions race to one.
	if err := del(r.Context(), s.st, key, rev); err != nil {
		s.localError(w, http.StatusBadRequest, "This login link was already used. Ask the hub's operator for a new one.")
		return
	}
	a, _, err := getRec[approverRec](r.Context(), s.st, approverKey(lr.Approver))
	if err != nil || a.Removed {
		s.localError(w, http.StatusForbidden, "This approver was removed.")
		return
	}
	sess := newSecret(prefixSession)
	now := s.cfg.Now().UTC()
	if err := createRec(r.Context(), s.st, sessionKey(sess),
		sessionRec{Approver: a.ID, CreatedAt: now, ExpiresAt: now.Add(s.cfg.SessionTTL)}, 0); err != nil {
		s.localError(w, http.StatusServiceUnavailable, "The hub could not start the session. Retry in a moment.")
		return
	}
	http.SetCookie(w, s.cookie(sessionCookie, sess, s.cfg.SessionTTL))
	s.log.Info("oauth approver signed in", "approver", a.ID, "addr", s.hub.ClientAddr(r))
	s.renderSignedIn(w, a)
}

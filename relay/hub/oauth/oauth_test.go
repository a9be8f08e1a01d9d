package oauth

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestMetadataIgnoresHostHeaders: the issuer and resource come from the
// configured public URL; a forged Host or X-Forwarded-Host changes neither.
func TestMetadataIgnoresHostHeaders(t *testing.T) {
	ta := startAS(t, nil)
	c := http.DefaultClient
	for _, hdr := range [][]string{nil, {"Host", "evil.example"}, {"X-Forwarded-Host", "evil.example", "X-Forwarded-Proto", "https"}} {
		as := do(t, c, http.MethodGet, ta.url+PathASMetadata, nil, hdr...).json(t)
		if as["issuer"] != ta.url || as["token_endpoint"] != ta.url+PathToken {
			t.Errorf("%v: AS metadata %v", hdr, as)
		}
		if m := as["code_challenge_methods_supported"].([]any); len(m) != 1 || m[0] != "S256" {
			t.Errorf("PKCE methods %v", m)
		}
		if as["authorization_response_iss_parameter_supported"] != true {
			t.Error("iss parameter not advertised")
		}
		for _, p := range []string{"/.well-known/oauth-protected-resource/mcp", "/.well-known/oauth-protected-resource"} {
			r := do(t, c, http.MethodGet, ta.url+p, nil, hdr...)
			prm := r.json(t)
			if prm["resource"] != ta.url+"/mcp" || prm["authorization_servers"].([]any)[0] != ta.url {
				t.Errorf("%v %s: %v", hdr, p, prm)
			}
		}
		r := do(t, c, http.MethodPost, ta.url+"/mcp", nil, hdr...)
		if r.status != 401 || !strings.Contains(r.header.Get("WWW-Authenticate"), `resource_metadata="`+ta.url+`/.well-known/oauth-protected-resource/mcp"`) ||
			!strings.Contains(r.header.Get("WWW-Authenticate"), `scope="rooms:read rooms:write"`) || strings.Contains(r.header.Get("WWW-Authenticate"), "error=") {
			t.Errorf("%v: 401 challenge %d %q", hdr, r.status, r.header.Get("WWW-Authenticate"))
		}
	}
	if r := do(t, c, http.MethodPost, ta.url+"/mcp", nil, "Authorization", "Bearer rro_nope"); r.status != 401 ||
		!strings.Contains(r.header.Get("WWW-Authenticate"), `error="invalid_token"`) {
		t.Errorf("garbage token: %d %q", r.status, r.header.Get("WWW-Authenticate"))
	}
	if _, err := New(Config{Hub: ta.as.hub}); err == nil {
		t.Error("no public URL accepted")
	}
	if _, err := New(Config{Hub: ta.as.hub, PublicURL: "http://hub.example.com"}); err == nil {
		t.Error("plain http public URL off loopback accepted")
	}
}

// TestRegistrationPolicy: an open redirect cannot be registered.
func TestRegistrationPolicy(t *testing.T) {
	ta := startAS(t, func(c *Config) { c.RegisterRate = 12 })
	post := func(body string) resp {
		req, _ := http.NewRequest(http.MethodPost, ta.url+PathRegister, strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		r, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer r.Body.Close()
		var m map[string]any
		_ = json.NewDecoder(r.Body).Decode(&m)
		b, _ := json.Marshal(m)
		return resp{r.StatusCode, r.Header, string(b)}
	}
	for _, u := range []string{"https://evil.example/cb", "javascript:alert(1)", "file:///etc/passwd", "http://localhost/cb#frag",
		"http://evil.example/cb", "http://user@127.0.0.1/cb", "data:text/html,hi"} {
		r := post(`{"redirect_uris":[` + mustQuote(u) + `]}`)
		if r.status != 400 || !strings.Contains(r.body, "invalid_redirect_uri") {
			t.Errorf("%s: %d %s", u, r.status, r.body)
		}
	}
	r := post(`{"redirect_uris":["https://insiders.vscode.dev/redirect","https://vscode.dev/redirect","http://127.0.0.1/","http://127.0.0.1:33418/","https://evil.example/x"],"client_name":"Visual Studio Code"}`)
	if r.status != 201 || strings.Contains(r.body, "evil") || !strings.Contains(r.body, "33418") || strings.Contains(r.body, "client_secret") {
		t.Errorf("VS Code: %d %s", r.status, r.body)
	}
	if r := post(`{"redirect_uris":["cursor://anysphere.cursor-mcp/oauth/callback"]}`); r.status != 201 {
		t.Errorf("Cursor: %d %s", r.status, r.body)
	}
	if r := post(`{"redirect_uris":["http://localhost/callback"],"token_endpoint_auth_method":"client_secret_basic"}`); r.status != 400 {
		t.Errorf("confidential client: %d %s", r.status, r.body)
	}
	var last resp
	for range 12 {
		last = post(`{"redirect_uris":["http://localhost/callback"]}`)
	}
	if last.status != http.StatusTooManyRequests {
		t.Errorf("registrations past the rate: %d", last.status)
	}
}

func mustQuote(s string) string { b, _ := json.Marshal(s); return string(b) }

// TestAuthorizeErrorsBeforeVerificationStayLocal: an unknown client or a
// redirect it did not register gets a page on the hub, never a redirect;
// the loopback port rule covers localhost too.
func TestAuthorizeErrorsBeforeVerificationStayLocal(t *testing.T) {
	ta := startAS(t, nil)
	client := ta.register("http://localhost/callback", "http://127.0.0.1/cb")
	c := browser(t)
	for _, a := range []authReq{
		{client: "rrcl-unknown", redirect: "http://localhost/callback"},
		{client: client, redirect: "https://evil.example/callback"},
		{client: client, redirect: "http://localhost:9/other"},
		{client: client, redirect: "http://127.0.0.1:9/callback"}, // registered for localhost, not 127.0.0.1
		{client: client, redirect: "http://localhost:9/callback?x=1"},
	} {
		r := do(t, c, http.MethodGet, ta.authorizeURL(a), nil)
		if r.status != 400 || r.header.Get("Location") != "" || !strings.Contains(r.header.Get("Content-Type"), "text/html") {
			t.Errorf("%+v: %d Location %q", a, r.status, r.header.Get("Location"))
		}
	}
	for _, redirect := range []string{"http://localhost:9/callback", "http://localhost/callback", "http://127.0.0.1:54321/cb"} {
		if r := do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil); r.status != 200 {
			t.Errorf("%s: %d", redirect, r.status)
		}
	}
}

// TestPKCEAndResourceAreRequired: no challenge, plain, a missing method
// (which RFC 7636 reads as plain) and a foreign resource go back to the
// client as errors with state and iss.
func TestPKCEAndResourceAreRequired(t *testing.T) {
	ta := startAS(t, nil)
	redirect := "http://127.0.0.1:5555/cb"
	client := ta.register("http://127.0.0.1/cb")
	c := browser(t)
	for _, tc := range []struct {
		a    authReq
		want string
	}{
		{authReq{challenge: "-"}, "invalid_request"},
		{authReq{method: "plain", challenge: verifier[:43]}, "invalid_request"},
		{authReq{method: "-"}, "invalid_request"},
		{authReq{resource: "https://other.example/mcp"}, "invalid_target"},
		{authReq{scope: "rooms:admin"}, "invalid_scope"},
	} {
		tc.a.client, tc.a.redirect = client, redirect
		r := do(t, c, http.MethodGet, ta.authorizeURL(tc.a), nil)
		if r.status != http.StatusSeeOther {
			t.Errorf("%+v: %d %s", tc.a, r.status, r.body)
			continue
		}
		q := location(t, r, redirect)
		if q.Get("error") != tc.want || q.Get("state") != "st-1" || q.Get("iss") != ta.url || q.Get("code") != "" {
			t.Errorf("%+v: %v", tc.a, q)
		}
	}
}

// TestFlowReachesTheDevice: approve, exchange, and the token calls tools;
// the token response and consent page carry the required headers.
func TestFlowReachesTheDevice(t *testing.T) {
	ta := startAS(t, nil)
	redirect := "http://localhost:40001/callback"
	client := ta.register("http://localhost/callback")
	c := browser(t)
	ta.signIn(c, hubapi.ScopeWrite, "p1")
	page := do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil)
	h := page.header
	if !strings.Contains(h.Get("Content-Security-Policy"), "frame-ancestors 'none'") || h.Get("X-Frame-Options") != "DENY" ||
		h.Get("Cache-Control") != "no-store" || strings.Contains(page.body, "<script") {
		t.Errorf("consent headers: %v", h)
	}
	for _, want := range []string{"Test &lt;b&gt;client&lt;/b&gt;", "unverified", "this computer (localhost, port 40001)", "p1",
		"propose apps", "owner's approval on the laptop", "roomrelay hub oauth revoke", "roomrelay oauth approve"} {
		if !strings.Contains(page.body, want) {
			t.Errorf("consent page lacks %q", want)
		}
	}
	f := form(page.body)
	r := do(t, c, http.MethodPost, ta.url+PathDecision, url.Values{"req": {f["req"]}, "csrf": {f["csrf"]}, "project": {"p1"}, "access": {"write"}, "action": {"approve"}})
	q := location(t, r, redirect)
	if q.Get("state") != "st-1" || q.Get("iss") != ta.url || !strings.HasPrefix(q.Get("code"), PrefixCode) {
		t.Fatalf("redirect query %v", q)
	}
	tr := ta.exchange(client, q.Get("code"), redirect)
	tok := tr.json(t)
	if tr.status != 200 || tr.header.Get("Cache-Control") != "no-store" || tok["token_type"] != "Bearer" ||
		!strings.HasPrefix(tok["access_token"].(string), PrefixAccess) || !strings.HasPrefix(tok["refresh_token"].(string), PrefixRefresh) ||
		tok["scope"] != "rooms:read rooms:write" || tok["expires_in"].(float64) != 3600 {
		t.Fatalf("token response %d %v %v", tr.status, tr.header, tok)
	}
	cs := ta.session(tok["access_token"].(string))
	testutil.Eventually(t, "read_room reaching the device", func() bool {
		isErr, text := callTool(t, cs, relay.CmdReadRoom, map[string]any{"room_id": "r1"})
		return !isErr && strings.Contains(text, "one")
	})
	// The same form again: decided once, no second code.
	if r := do(t, c, http.MethodPost, ta.url+PathDecision, url.Values{"req": {f["req"]}, "csrf": {f["csrf"]}, "project": {"p1"}, "action": {"approve"}}); r.header.Get("Location") != "" {
		t.Errorf("a replayed decision redirected: %d", r.status)
	}
	// rrc_ tokens are unchanged beside OAuth.
	ct, err := ta.cl.CreateClientToken(t.Context(), "p1", hubapi.ScopeRead, "")
	if err != nil {
		t.Fatal(err)
	}
	if s := ta.mcpStatus(ct.Token); s == 401 {
		t.Error("an rrc_ token was refused")
	}
}

// TestConsentCSRF: a decision without the CSRF token, with another
// request's token, from another browser or from another site approves
// nothing and redirects nowhere.
func TestConsentCSRF(t *testing.T) {
	ta := startAS(t, nil)
	redirect := "http://127.0.0.1:5555/cb"
	client := ta.register("http://127.0.0.1/cb")
	c := browser(t)
	ta.signIn(c, hubapi.ScopeWrite, "p1")
	f1 := form(do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil).body)
	f2 := form(do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil).body)
	other := browser(t)
	ta.signIn(other, hubapi.ScopeWrite, "p1")
	dec := func(c *http.Client, req, csrf string, hdr ...string) resp {
		return do(t, c, http.MethodPost, ta.url+PathDecision, url.Values{"req": {req}, "csrf": {csrf}, "project": {"p1"}, "action": {"approve"}}, hdr...)
	}
	for name, r := range map[string]resp{
		"no csrf":         dec(c, f1["req"], ""),
		"other's csrf":    dec(c, f1["req"], f2["csrf"]),
		"other browser":   dec(other, f1["req"], f1["csrf"]),
		"cross-site post": dec(c, f1["req"], f1["csrf"], "Origin", "https://evil.example"),
		"unknown request": dec(c, "rq-000000000000000000000000", f1["csrf"]),
	} {
		if r.status != http.StatusForbidden || r.header.Get("Location") != "" {
			t.Errorf("%s: %d %q", name, r.status, r.header.Get("Location"))
		}
	}
	if r := dec(c, f1["req"], f1["csrf"]); r.status != http.StatusSeeOther {
		t.Errorf("the right form: %d %s", r.status, r.body)
	}
}

// TestCodeRules: a wrong verifier spends the code; a replay revokes what
// the first exchange issued; a foreign resource is invalid_target; a wrong
// redirect does not spend the code.
func TestCodeRules(t *testing.T) {
	ta := startAS(t, nil)
	redirect := "http://127.0.0.1:5555/cb"
	client := ta.register("http://127.0.0.1/cb")
	c := browser(t)
	ta.signIn(c, hubapi.ScopeWrite, "p1")
	code := func() string {
		return ta.approve(c, authReq{client: client, redirect: redirect}, "p1", "read").Get("code")
	}

	k := code()
	r := ta.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {client}, "code": {k}, "redirect_uri": {redirect},
		"code_verifier": {strings.Repeat("x", 50)}})
	if r.status != 400 || r.json(t)["error"] != "invalid_grant" {
		t.Errorf("wrong verifier: %d %s", r.status, r.body)
	}
	if r := ta.exchange(client, k, redirect); r.status != 400 {
		t.Errorf("the code survived a wrong verifier: %d", r.status)
	}
	k = code()
	if r := ta.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {client}, "code": {k}, "redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {"https://other.example/mcp"}}); r.json(t)["error"] != "invalid_target" {
		t.Errorf("foreign resource: %s", r.body)
	}
	if r := ta.exchange(client, k, "http://127.0.0.1:5556/cb"); r.json(t)["error"] != "invalid_grant" {
		t.Errorf("other redirect: %s", r.body)
	}
	first := ta.exchange(client, k, redirect)
	if first.status != 200 {
		t.Fatalf("the code was spent by a wrong redirect or resource: %d %s", first.status, first.body)
	}
	at := first.json(t)["access_token"].(string)
	if s := ta.mcpStatus(at); s == 401 {
		t.Fatal("fresh token refused")
	}
	if r := ta.exchange(client, k, redirect); r.json(t)["error"] != "invalid_grant" {
		t.Errorf("replay: %s", r.body)
	}
	if s := ta.mcpStatus(at); s != 401 {
		t.Errorf("the first exchange's token works after a replay: %d", s)
	}
	k = code()
	ta.clock.advance(2 * time.Minute)
	if r := ta.exchange(client, k, redirect); r.json(t)["error"] != "invalid_grant" {
		t.Errorf("expired code: %s", r.body)
	}
}

// TestRefreshRules: rotation with a grace, a reuse after the grace revokes
// the grant, a refresh cannot widen scope, an expired access token is 401.
func TestRefreshRules(t *testing.T) {
	ta := startAS(t, func(c *Config) { c.RefreshGrace = time.Minute })
	client, tok := ta.fullFlow("read")
	rt := tok["refresh_token"].(string)
	refresh := func(rt, scope string) resp {
		f := url.Values{"grant_type": {"refresh_token"}, "client_id": {client}, "refresh_token": {rt}, "resource": {ta.url + "/mcp"}}
		if scope != "" {
			f.Set("scope", scope)
		}
		return ta.token(f)
	}
	if r := refresh(rt, "rooms:read rooms:write"); r.json(t)["error"] != "invalid_scope" {
		t.Errorf("widening refresh: %s", r.body)
	}
	ta.clock.advance(2 * time.Hour)
	if s := ta.mcpStatus(tok["access_token"].(string)); s != 401 {
		t.Errorf("expired access token: %d", s)
	}
	r1 := refresh(rt, "")
	if r1.status != 200 || r1.json(t)["scope"] != "rooms:read" {
		t.Fatalf("refresh: %s", r1.body)
	}
	if r := refresh(rt, ""); r.status != 200 { // a racing client inside the grace
		t.Fatalf("reuse inside the grace: %s", r.body)
	}
	if r := ta.token(url.Values{"grant_type": {"refresh_token"}, "client_id": {"rrcl-other"}, "refresh_token": {r1.json(t)["refresh_token"].(string)}}); r.json(t)["error"] != "invalid_grant" {
		t.Errorf("another client's refresh: %s", r.body)
	}
	at := r1.json(t)["access_token"].(string)
	if s := ta.mcpStatus(at); s == 401 {
		t.Fatal("refreshed token refused")
	}
	ta.clock.advance(2 * time.Minute)
	if r := refresh(rt, ""); r.json(t)["error"] != "invalid_grant" {
		t.Errorf("reuse after the grace: %s", r.body)
	}
	if s := ta.mcpStatus(at); s != 401 {
		t.Errorf("the grant survived a refresh reused after the grace: %d", s)
	}
	if r := refresh(r1.json(t)["refresh_token"].(string), ""); r.status != 400 {
		t.Errorf("the newest refresh token of a revoked grant: %d", r.status)
	}
}

// TestReadGrantWriteTool: a read grant gets today's tool error, with how
// to re-authorize.
func TestReadGrantWriteTool(t *testing.T) {
	ta := startAS(t, nil)
	_, tok := ta.fullFlow("read")
	cs := ta.session(tok["access_token"].(string))
	isErr, text := callTool(t, cs, relay.CmdSmokeRunRoomApp, map[string]any{"room_id": "r1", "app_id": "a1"})
	if !isErr || !strings.HasPrefix(text, "command_not_allowed") || !strings.Contains(text, "re-authorize") {
		t.Errorf("write tool with a read grant: %v %q", isErr, text)
	}
}

// TestRevocation: the operator's revoke and RFC 7009 stop the tokens at
// the next request.
func TestRevocation(t *testing.T) {
	ta := startAS(t, nil)
	_, tok := ta.fullFlow("write")
	at := tok["access_token"].(string)
	gs, err := ta.as.Grants(t.Context(), "p1")
	if err != nil || len(gs) != 1 || gs[0].ApprovedVia != "approver" {
		t.Fatalf("grants %v %v", gs, err)
	}
	if _, err := ta.as.RevokeGrant(t.Context(), gs[0].ID, "test"); err != nil {
		t.Fatal(err)
	}
	if s := ta.mcpStatus(at); s != 401 {
		t.Errorf("after an admin revoke: %d", s)
	}
	_, tok = ta.fullFlow("write")
	if r := do(t, http.DefaultClient, http.MethodPost, ta.url+PathRevoke, url.Values{"token": {tok["refresh_token"].(string)}}); r.status != 200 {
		t.Fatalf("revoke: %d", r.status)
	}
	if s := ta.mcpStatus(tok["access_token"].(string)); s != 401 {
		t.Errorf("after RFC 7009 revoke of the refresh token: %d", s)
	}
}

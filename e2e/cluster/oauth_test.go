//go:build linux

package cluster

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// OAuth on the cluster: every hub has the same --public-url (hub-a's URL),
// so one issuer and one MCP resource; each step of a sign-in lands on
// another node, and a revocation made on one node holds on the others at
// their next request (the access token and its grant are read on every
// /mcp request, a "not found" confirmed with the stream leader).

var hiddenFieldRe = regexp.MustCompile(`name="(req|csrf)" value="([^"]*)"`)

// oauthTokens signs a client in across the nodes: registration on regOn
// (registrations are limited per address and node), the approver's login
// link on hub-b, the consent page on hub-c, the decision on hub-a, the
// code exchange on hub-b. It returns the access and refresh tokens and the
// client id.
func (c *cluster) oauthTokens(regOn *hubNode, login string) (access, refresh, client string) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	redirect := "http://127.0.0.1:43210/callback"
	r, err := c.http.Post(regOn.url()+"/oauth/register", "application/json",
		strings.NewReader(`{"client_name":"cluster client","redirect_uris":["http://127.0.0.1/callback"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ID string `json:"client_id"`
	}
	json.NewDecoder(r.Body).Decode(&reg)
	r.Body.Close()
	if reg.ID == "" {
		t.Fatalf("registration on %s: %s", regOn.name, r.Status)
	}
	// Cookies are per host, not port: the jar carries the session and the
	// request's cookie from node to node, as one hostname behind a balancer.
	jar, _ := cookiejar.New(nil)
	br := &http.Client{Jar: jar, Timeout: 10 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	lu, _ := url.Parse(login)
	if resp, err := br.Get(hubB.url() + lu.RequestURI()); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("the approver's login link on hub-b: %v %v", err, resp)
	} else {
		resp.Body.Close()
	}
	verifier := strings.Repeat("c", 50)
	sum := sha256.Sum256([]byte(verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {reg.ID}, "redirect_uri": {redirect}, "state": {"s"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	resp, err := br.Get(hubC.url() + "/oauth/authorize?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	f := map[string]string{}
	for _, m := range hiddenFieldRe.FindAllStringSubmatch(string(page), -1) {
		f[m[1]] = m[2]
	}
	if resp.StatusCode != http.StatusOK || f["req"] == "" || f["csrf"] == "" {
		t.Fatalf("consent page on hub-c (signed in on hub-b): %d\n%s", resp.StatusCode, page)
	}
	resp, err = br.PostForm(hubA.url()+"/oauth/authorize/decision", url.Values{"req": {f["req"]}, "csrf": {f["csrf"]},
		"project": {project}, "access": {"read"}, "action": {"approve"}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc.Query().Get("code") == "" {
		t.Fatalf("decision on hub-a: %d %s", resp.StatusCode, loc)
	}
	resp, err = c.http.PostForm(hubB.url()+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ID},
		"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
	}
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if !strings.HasPrefix(tok.Access, "rro_") || !strings.HasPrefix(tok.Refresh, "rrf_") {
		t.Fatalf("code exchange on hub-b: %s", resp.Status)
	}
	return tok.Access, tok.Refresh, reg.ID
}

// mcpStatus is the status of an MCP initialize with token on h.
func (c *cluster) mcpStatus(h *hubNode, token string) int {
	c.t.Helper()
	req, _ := http.NewRequest(http.MethodPost, h.url()+"/mcp", strings.NewReader(
		`{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"cluster","version":"1"}}}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.http.Do(req)
	if err != nil {
		c.t.Fatalf("MCP initialize on %s: %v", h.name, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// testOAuthRevocation: a grant signed in across the nodes works on each;
// revoked by the operator on hub-a, the very next request on hub-b and on
// hub-c is 401; a second grant revoked by its client (RFC 7009) on hub-b is
// 401 at once on hub-a and hub-c.
func testOAuthRevocation(c *cluster) {
	t := c.t
	hubA, hubB, hubC := c.hubs[0], c.hubs[1], c.hubs[2]
	ctx := context.Background()
	login, err := hubC.cl.AddApprover(ctx, hubapi.ApproverRequest{Name: "cluster approver", Projects: []string{project}})
	if err != nil {
		t.Fatalf("approver on hub-c: %v", err)
	}
	access, _, client := c.oauthTokens(hubA, login.LoginURL)
	for _, h := range c.hubs {
		if s := c.mcpStatus(h, access); s != http.StatusOK {
			t.Fatalf("the access token on %s: %d", h.name, s)
		}
	}
	// A figure, not asserted: an MCP initialize on hub-b with the OAuth
	// token (its grant read from the stream leader) and with a client
	// token, alternating.
	if tok, err := hubB.cl.CreateClientToken(ctx, project, hubapi.ScopeRead, "cluster-oauth-compare"); err == nil {
		var oauthLat, tokLat []time.Duration
		for range 100 {
			t0 := time.Now()
			c.mcpStatus(hubB, access)
			oauthLat = append(oauthLat, time.Since(t0))
			t0 = time.Now()
			c.mcpStatus(hubB, tok.Token)
			tokLat = append(tokLat, time.Since(t0))
		}
		slices.Sort(oauthLat)
		slices.Sort(tokLat)
		t.Logf("MCP initialize on hub-b, p50 of 100: OAuth %s, client token %s", oauthLat[50], tokLat[50])
	}
	gs, err := hubA.cl.OAuthGrants(ctx, project)
	var grant string
	for _, g := range gs {
		if g.ClientID == client && !g.Revoked {
			grant = g.ID
		}
	}
	if err != nil || grant == "" {
		t.Fatalf("the grant, listed on hub-a: %+v %v", gs, err)
	}
	if _, err := hubA.cl.RevokeOAuthGrant(ctx, grant); err != nil {
		t.Fatalf("revoke on hub-a: %v", err)
	}
	for _, h := range []*hubNode{hubB, hubC, hubA} {
		if s := c.mcpStatus(h, access); s != http.StatusUnauthorized {
			t.Errorf("the first request on %s after the operator revoked the grant on hub-a: %d, want 401", h.name, s)
		}
	}

	login2, err := hubA.cl.ApproverLoginLink(ctx, login.Approver.ID)
	if err != nil {
		t.Fatalf("a new login link: %v", err)
	}
	access2, refresh2, client2 := c.oauthTokens(hubC, login2.LoginURL)
	for _, h := range c.hubs {
		if s := c.mcpStatus(h, access2); s != http.StatusOK {
			t.Fatalf("the second grant's token on %s: %d", h.name, s)
		}
	}
	resp, err := c.http.PostForm(hubB.url()+"/oauth/revoke", url.Values{"token": {refresh2}, "client_id": {client2}})
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("RFC 7009 revoke on hub-b: %v %v", err, resp)
	}
	resp.Body.Close()
	for _, h := range []*hubNode{hubA, hubC, hubB} {
		if s := c.mcpStatus(h, access2); s != http.StatusUnauthorized {
			t.Errorf("the first request on %s after the client revoked its grant on hub-b: %d, want 401", h.name, s)
		}
	}
}

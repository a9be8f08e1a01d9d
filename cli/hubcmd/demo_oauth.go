package hubcmd

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/oauth"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The demo's OAuth step: what `claude mcp add --transport http roomrelay
// URL/mcp` does with no pasted token, driven by the demo itself. The MCP
// client meets a 401, discovers the hub's authorization server, registers,
// and opens the consent page (here: a cookie jar, no browser); nobody is
// signed in, so the page shows a device code, which the laptop's owner
// approves in the desktop app (the agent's local API, the same call as
// `roomrelay oauth approve CODE`); the page then continues to the client's
// loopback redirect, the client exchanges the code with its PKCE verifier
// and calls read_room with the access token.

var demoDeviceCodeRe = regexp.MustCompile(`roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})`)
var demoReqRe = regexp.MustCompile(`name="req" value="([^"]+)"`)

// countingTransport counts the HTTP requests of the flow.
type countingTransport struct {
	n atomic.Int64
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	c.n.Add(1)
	return http.DefaultTransport.RoundTrip(r)
}

// oauthFlow is one headless client's sign-in: a cookie jar that does not
// follow redirects, like a browser whose address bar the demo reads.
type oauthFlow struct {
	ctx context.Context
	hc  *http.Client
}

func (f *oauthFlow) do(method, u, contentType string, body io.Reader, out any) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(f.ctx, method, u, body)
	if err != nil {
		return nil, nil, err
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := f.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return resp, nil, err
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return resp, b, fmt.Errorf("%s %s: %d, not JSON: %.200s", method, u, resp.StatusCode, b)
		}
	}
	return resp, b, nil
}

// oauthStep runs the flow and reports it; a step that misbehaves is an
// UNEXPECTED line (the demo goes on).
func (d *demo) oauthStep(ctx context.Context, hubURL, configDir, roomID string) {
	if err := d.oauthFlow(ctx, hubURL, configDir, roomID); err != nil {
		d.expect(false, "the OAuth flow: %v", err)
	}
}

func (d *demo) oauthFlow(ctx context.Context, hubURL, configDir, roomID string) error {
	t0 := time.Now()
	ct := &countingTransport{}
	jar, _ := cookiejar.New(nil)
	f := &oauthFlow{ctx: ctx, hc: &http.Client{Transport: ct, Jar: jar, Timeout: 15 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}

	// Discovery: the 401 names the protected-resource metadata, which
	// names the authorization server.
	resp, _, err := f.do(http.MethodPost, hubURL+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`), nil)
	if err != nil {
		return err
	}
	challenge := resp.Header.Get("WWW-Authenticate")
	m := regexp.MustCompile(`resource_metadata="([^"]+)"`).FindStringSubmatch(challenge)
	if resp.StatusCode != http.StatusUnauthorized || m == nil {
		return fmt.Errorf("POST /mcp without a token: %d %q", resp.StatusCode, challenge)
	}
	var prm struct {
		Resource string   `json:"resource"`
		AS       []string `json:"authorization_servers"`
	}
	if _, _, err := f.do(http.MethodGet, m[1], "", nil, &prm); err != nil {
		return err
	}
	if len(prm.AS) != 1 {
		return fmt.Errorf("protected-resource metadata names %d authorization servers", len(prm.AS))
	}
	var asm struct {
		Issuer   string   `json:"issuer"`
		Register string   `json:"registration_endpoint"`
		Auth     string   `json:"authorization_endpoint"`
		Token    string   `json:"token_endpoint"`
		Methods  []string `json:"code_challenge_methods_supported"`
	}
	if _, _, err := f.do(http.MethodGet, prm.AS[0]+oauth.PathASMetadata, "", nil, &asm); err != nil {
		return err
	}
	d.say("MCP client with no token (what `claude mcp add --transport http roomrelay %s/mcp` does): POST /mcp → 401; metadata → issuer %s, PKCE %s, registration open", hubURL, asm.Issuer, strings.Join(asm.Methods, ","))

	// Registration (RFC 7591): a public client with a loopback redirect.
	var reg struct {
		ClientID string `json:"client_id"`
	}
	resp, _, err = f.do(http.MethodPost, asm.Register, "application/json",
		strings.NewReader(`{"client_name":"demo coding agent","redirect_uris":["http://127.0.0.1/callback"],"grant_types":["authorization_code","refresh_token"],"token_endpoint_auth_method":"none"}`), &reg)
	if err != nil || resp.StatusCode != http.StatusCreated {
		return fmt.Errorf("registration: %v (%v)", err, statusOf(resp))
	}
	verifier := rand.Text() + rand.Text()
	sum := sha256.Sum256([]byte(verifier))
	redirect := "http://127.0.0.1:53682/callback" // the port the client opened; loopback ports are not matched
	q := url.Values{"response_type": {"code"}, "client_id": {reg.ClientID}, "redirect_uri": {redirect}, "state": {"demo-state"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"},
		"resource": {prm.Resource}, "scope": {hubapi.OAuthScopeRead}}
	resp, page, err := f.do(http.MethodGet, asm.Auth+"?"+q.Encode(), "", nil, nil)
	if err != nil {
		return err
	}
	code, req := demoDeviceCodeRe.FindSubmatch(page), demoReqRe.FindSubmatch(page)
	if resp.StatusCode != http.StatusOK || code == nil || req == nil {
		return fmt.Errorf("the consent page (%d) shows no device code", resp.StatusCode)
	}
	d.say("MCP client: registered as %s (unverified), opens the consent page in the browser: nobody signed in, so it offers \"roomrelay oauth approve %s\" on the laptop", reg.ClientID, code[1])

	// The laptop's owner approves in the desktop app, through the agent.
	api, _, err := localapi.Discover(ctx, configDir)
	if err != nil {
		return err
	}
	defer api.Close()
	api.Name = "roomrelay-demo/" + cli.Version
	var ask hubapi.OAuthApprovalRequest
	if _, err := api.Do(ctx, http.MethodGet, "oauth/"+string(code[1]), nil, &ask, nil); err != nil {
		return fmt.Errorf("the local API's oauth/%s: %w", code[1], err)
	}
	var dec localapi.OAuthDecideResponse
	if _, err := api.Do(ctx, http.MethodPost, "oauth/"+string(code[1]), localapi.OAuthDecideRequest{Approve: true}, &dec, nil); err != nil {
		return fmt.Errorf("approve through the local API: %w", err)
	}
	d.say("device owner, in the desktop app (local API GET+POST /localapi/v1/oauth/%s): %q asks to %s rooms of %s, returning to %s → approved %s, bound to this device",
		code[1], ask.ClientName, ask.Scope, strings.Join(ask.Projects, ","), ask.RedirectHost, dec.Scope)

	// The consent page continues to the client's redirect; the client
	// exchanges the code with its verifier.
	resp, _, err = f.do(http.MethodGet, hubURL+oauth.PathWait+"?"+url.Values{"req": {string(req[1])}, "code": {string(code[1])}}.Encode(), "", nil, nil)
	if err != nil {
		return err
	}
	loc, _ := url.Parse(resp.Header.Get("Location"))
	if resp.StatusCode != http.StatusSeeOther || loc == nil || loc.Query().Get("code") == "" {
		return fmt.Errorf("the consent page after the approval: %d, no redirect with a code", resp.StatusCode)
	}
	if got := loc.Query().Get("iss"); got != asm.Issuer {
		return fmt.Errorf("the redirect's iss %q is not the issuer %q", got, asm.Issuer)
	}
	var tok struct {
		Access  string `json:"access_token"`
		Refresh string `json:"refresh_token"`
		Scope   string `json:"scope"`
		Expires int    `json:"expires_in"`
	}
	form := url.Values{"grant_type": {"authorization_code"}, "client_id": {reg.ClientID}, "code": {loc.Query().Get("code")},
		"redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {prm.Resource}}
	resp, _, err = f.do(http.MethodPost, asm.Token, "application/x-www-form-urlencoded", strings.NewReader(form.Encode()), &tok)
	if err != nil || resp.StatusCode != http.StatusOK || tok.Access == "" {
		return fmt.Errorf("the code exchange: %v (%v)", err, statusOf(resp))
	}
	d.say("browser → %s:%s?code=…&iss=…; the client exchanges the code with its PKCE verifier → access %.8s… (%d s), refresh %.8s…, scope %s — %d HTTP requests (%s)",
		loc.Hostname(), loc.Port(), tok.Access, tok.Expires, tok.Refresh, tok.Scope, ct.n.Load(), since(t0))

	// The MCP client now calls with the access token.
	t1 := time.Now()
	c := mcp.NewClient(&mcp.Implementation{Name: "roomrelay-demo-oauth", Version: cli.Version}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: hubURL + "/mcp", HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: tok.Access}}}, nil)
	if err != nil {
		return fmt.Errorf("mcp connect with the OAuth token: %w", err)
	}
	defer cs.Close()
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	r, err := cs.CallTool(cctx, &mcp.CallToolParams{Name: relay.CmdReadRoom, Arguments: map[string]any{"room_id": roomID}})
	if err != nil {
		return fmt.Errorf("read_room with the OAuth token: %w", err)
	}
	d.expect(!r.IsError, "read_room with the OAuth token: %s", mcpText(r))
	d.say("MCP client with the OAuth token: read_room → %s (%s)", mcpText(r), since(t1))
	return nil
}

func statusOf(r *http.Response) any {
	if r == nil {
		return errors.New("no answer")
	}
	return r.Status
}

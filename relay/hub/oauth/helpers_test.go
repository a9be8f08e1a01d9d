package oauth

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const admin = "rra_oauth-test"

// clock is a settable test clock for the authorization server.
type clock struct {
	mu  sync.Mutex
	off time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.off)
}

func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.off += d
	c.mu.Unlock()
}

// testAS is a real hub (embedded NATS) with the MCP front and the
// authorization server mounted on a loopback port, and a scripted device
// enrolled for p1 serving rooms r1 and r2.
type testAS struct {
	t      *testing.T
	h      *hub.Hub
	url    string
	as     *Server
	cl     *hubclient.Client
	clock  *clock
	devTok string
	devID  string
}

func startAS(t *testing.T, mod func(*Config)) *testAS {
	t.Helper()
	return startASHub(t, hub.Config{}, mod)
}

// startASHub is startAS on a hub configured from hc.
func startASHub(t *testing.T, hc hub.Config, mod func(*Config)) *testAS {
	t.Helper()
	hc.DataDir, hc.AdminToken, hc.Heartbeat = t.TempDir(), admin, time.Minute
	h, err := hub.New(hc)
	if err != nil {
		t.Fatal(err)
	}
	var mux http.Handler
	srv := testutil.Serve(t, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.ServeHTTP(w, r) }))
	ck := &clock{}
	cfg := Config{Hub: h, PublicURL: srv.URL(), Now: ck.now}
	if mod != nil {
		mod(&cfg)
	}
	as, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	front, err := mcpfront.New(mcpfront.Config{Hub: h, PublicURL: srv.URL(), OAuth: as})
	if err != nil {
		t.Fatal(err)
	}
	m := http.NewServeMux()
	as.Mount(m)
	front.Mount(m)
	m.Handle("/", h.Handler())
	mux = m
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Run(ctx) }()
	<-h.Ready()
	t.Cleanup(func() { cancel(); <-done; srv.Close() })
	ta := &testAS{t: t, h: h, url: srv.URL(), as: as, cl: hubclient.New(srv.URL(), admin), clock: ck}
	pc, err := ta.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	en, err := ta.cl.Enroll(ctx, pc.Code, "laptop", "linux", "")
	if err != nil {
		t.Fatal(err)
	}
	ta.devTok, ta.devID = en.Token, en.DeviceID
	fakeDevice(t, srv.URL(), en.Token, en.DeviceID,
		[]relay.RoomEntry{{Project: "p1", RoomID: "r1", Name: "one"}, {Project: "p1", RoomID: "r2", Name: "two"}})
	return ta
}

// fakeDevice answers every command with a room summary.
func fakeDevice(t *testing.T, hubURL, token, dev string, rooms []relay.RoomEntry) {
	t.Helper()
	testhub.FakeDevice(t, hubURL, admin, token, dev, rooms, func(cmd *relay.Command) *relay.Result {
		return &relay.Result{ID: cmd.ID, OK: true, Result: json.RawMessage(`{"id":"r1","name":"one","app_count":0,"pending_proposals":0}`)}
	})
}

// browser is a cookie jar that does not follow redirects.
func browser(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type resp struct {
	status int
	header http.Header
	body   string
}

func do(t *testing.T, c *http.Client, method, u string, form url.Values, hdr ...string) resp {
	t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, u, body)
	if err != nil {
		t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i] == "Host" {
			req.Host = hdr[i+1]
		} else {
			req.Header.Set(hdr[i], hdr[i+1])
		}
	}
	r, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	return resp{r.StatusCode, r.Header, string(b)}
}

func (r resp) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(r.body), &m); err != nil {
		t.Fatalf("not JSON (%d): %s", r.status, r.body)
	}
	return m
}

// register registers a client with redirect URIs.
func (ta *testAS) register(redirects ...string) string {
	ta.t.Helper()
	b, _ := json.Marshal(map[string]any{"redirect_uris": redirects, "client_name": "Test <b>client</b>"})
	r, err := http.Post(ta.url+PathRegister, "application/json", strings.NewReader(string(b)))
	if err != nil {
		ta.t.Fatal(err)
	}
	defer r.Body.Close()
	var out map[string]any
	_ = json.NewDecoder(r.Body).Decode(&out)
	if r.StatusCode != http.StatusCreated {
		ta.t.Fatalf("register: %d %v", r.StatusCode, out)
	}
	return out["client_id"].(string)
}

// signIn adds an approver for projects and redeems the login link in c.
func (ta *testAS) signIn(c *http.Client, maxScope string, projects ...string) {
	ta.t.Helper()
	var out hubapi.ApproverLogin
	b, _ := json.Marshal(hubapi.ApproverRequest{Name: "alice", Projects: projects, MaxScope: maxScope})
	req, _ := http.NewRequest(http.MethodPost, ta.url+"/v1/oauth/approvers", strings.NewReader(string(b)))
	req.Header.Set("Authorization", "Bearer "+admin)
	r, err := http.DefaultClient.Do(req)
	if err != nil {
		ta.t.Fatal(err)
	}
	_ = json.NewDecoder(r.Body).Decode(&out)
	r.Body.Close()
	if r.StatusCode != http.StatusCreated {
		ta.t.Fatalf("approver add: %d", r.StatusCode)
	}
	if lr := do(ta.t, c, http.MethodGet, out.LoginURL, nil); lr.status != 200 {
		ta.t.Fatalf("login: %d %s", lr.status, lr.body)
	}
}

const verifier = "a-verifier-of-enough-length-0123456789-abcdefghijklmnop"

type authReq struct {
	client, redirect, scope, resource, method, challenge, state string
}

func (ta *testAS) authorizeURL(a authReq) string {
	v := url.Values{"response_type": {"code"}, "client_id": {a.client}, "redirect_uri": {a.redirect}, "state": {"st-1"}}
	if a.state != "" {
		v.Set("state", a.state)
	}
	ch := a.challenge
	if ch == "" {
		ch = pkceS256(verifier)
	}
	if ch != "-" {
		v.Set("code_challenge", ch)
	}
	switch a.method {
	case "":
		v.Set("code_challenge_method", "S256")
	case "-":
	default:
		v.Set("code_challenge_method", a.method)
	}
	if a.scope != "" {
		v.Set("scope", a.scope)
	}
	if a.resource != "" {
		v.Set("resource", a.resource)
	}
	return ta.url + PathAuthorize + "?" + v.Encode()
}

var hiddenRe = regexp.MustCompile(`name="(req|csrf|code)" value="([^"]*)"`)

// form reads the consent page's hidden fields.
func form(page string) map[string]string {
	out := map[string]string{}
	for _, m := range hiddenRe.FindAllStringSubmatch(page, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// approve opens the consent page in c and approves project with access;
// it returns the redirect's query.
func (ta *testAS) approve(c *http.Client, a authReq, project, access string) url.Values {
	ta.t.Helper()
	page := do(ta.t, c, http.MethodGet, ta.authorizeURL(a), nil)
	if page.status != 200 {
		ta.t.Fatalf("consent page: %d %s", page.status, page.body)
	}
	f := form(page.body)
	r := do(ta.t, c, http.MethodPost, ta.url+PathDecision, url.Values{"req": {f["req"]}, "csrf": {f["csrf"]},
		"project": {project}, "access": {access}, "action": {"approve"}})
	if r.status != http.StatusSeeOther {
		ta.t.Fatalf("decision: %d %s", r.status, r.body)
	}
	return location(ta.t, r, a.redirect)
}

// location parses a redirect and checks it goes where it should.
func location(t *testing.T, r resp, redirect string) url.Values {
	t.Helper()
	loc, err := url.Parse(r.header.Get("Location"))
	if err != nil {
		t.Fatal(err)
	}
	want, _ := url.Parse(redirect)
	if loc.Scheme != want.Scheme || loc.Host != want.Host || loc.Path != want.Path {
		t.Fatalf("redirected to %s, want %s", loc, redirect)
	}
	return loc.Query()
}

func (ta *testAS) token(form url.Values) resp {
	ta.t.Helper()
	return do(ta.t, http.DefaultClient, http.MethodPost, ta.url+PathToken, form)
}

func (ta *testAS) exchange(client, code, redirect string) resp {
	return ta.token(url.Values{"grant_type": {"authorization_code"}, "client_id": {client}, "code": {code},
		"redirect_uri": {redirect}, "code_verifier": {verifier}, "resource": {ta.url + "/mcp"}})
}

// fullFlow registers, approves and exchanges; it returns the token response.
func (ta *testAS) fullFlow(access string) (client string, tok map[string]any) {
	ta.t.Helper()
	redirect := "http://127.0.0.1:43123/callback"
	client = ta.register("http://127.0.0.1/callback")
	c := browser(ta.t)
	ta.signIn(c, hubapi.ScopeWrite, "p1")
	q := ta.approve(c, authReq{client: client, redirect: redirect}, "p1", access)
	r := ta.exchange(client, q.Get("code"), redirect)
	if r.status != 200 {
		ta.t.Fatalf("exchange: %d %s", r.status, r.body)
	}
	return client, r.json(ta.t)
}

// mcpStatus is the status of an MCP initialize with token.
func (ta *testAS) mcpStatus(token string) int {
	ta.t.Helper()
	r := do(ta.t, http.DefaultClient, http.MethodPost, ta.url+"/mcp", nil, "Authorization", "Bearer "+token,
		"Content-Type", "application/json", "Accept", "application/json, text/event-stream")
	return r.status
}

func (ta *testAS) session(token string) *mcp.ClientSession {
	ta.t.Helper()
	c := mcp.NewClient(&mcp.Implementation{Name: "oauth-test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: ta.url + "/mcp",
		HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: token}}}, nil)
	if err != nil {
		ta.t.Fatal(err)
	}
	ta.t.Cleanup(func() { cs.Close() })
	return cs
}

func callTool(t *testing.T, cs *mcp.ClientSession, name string, args any) (bool, string) {
	t.Helper()
	r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var text string
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text += tc.Text
		}
	}
	return r.IsError, text
}

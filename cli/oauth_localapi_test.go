package cli

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/oauth"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// startOAuthHub is a real hub with its OAuth authorization server mounted:
// the issuer is the listener's URL, known only once it listens, so the
// handler is set after Start.
func startOAuthHub(t *testing.T) *testHub {
	t.Helper()
	var mux atomic.Pointer[http.ServeMux]
	th := testhub.Start(t, hub.Config{AdminToken: "rra_t"}, testhub.Options{Handler: func(*hub.Hub) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { mux.Load().ServeHTTP(w, r) })
	}})
	as, err := oauth.New(oauth.Config{Hub: th.Hub, PublicURL: th.URL()})
	if err != nil {
		t.Fatal(err)
	}
	m := http.NewServeMux()
	as.Mount(m)
	m.Handle("/", th.Hub.Handler())
	mux.Store(m)
	return &testHub{Hub: th, ctx: t.Context()}
}

// deviceAPI is a device's local API on a real socket, approving sign-ins
// through agent/device with the device's enrolled identity (what `roomrelay
// run` wires), with its own audit log.
func deviceAPI(t *testing.T, home string) (*localapi.Client, *audit.Log) {
	t.Helper()
	p, err := device.ResolvePaths(home, func(string) string { return "" })
	if err != nil {
		t.Fatal(err)
	}
	al, err := audit.Open(filepath.Join(p.State, "audit"), audit.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	srv, err := localapi.Open(localapi.Config{Listen: localapi.ListenConfig{StateDir: p.State}, ConfigDir: p.Config,
		Status: func() agent.Status { return agent.Status{State: agent.StateOnline} }, Audit: al,
		OAuth: device.OAuthApprover{Paths: p}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Run(ctx) }()
	c := localapi.NewClient(srv.Endpoint())
	c.Name = "oauth-test-app/1"
	t.Cleanup(func() { c.Close(); cancel(); <-done })
	return c, al
}

var signInCodeRe = regexp.MustCompile(`roomrelay oauth approve ([A-Z0-9]{4}-[A-Z0-9]{4})`)

// signIn is a browser's sign-in in progress: registered client, consent
// page open (nobody signed in, so it shows the device code).
type signIn struct {
	hubURL, client, redirect, verifier, code, req string
	browser                                       *http.Client
}

func startSignIn(t *testing.T, hubURL string) *signIn {
	t.Helper()
	r, err := http.Post(hubURL+oauth.PathRegister, "application/json",
		strings.NewReader(`{"client_name":"Local API test client","redirect_uris":["http://127.0.0.1/callback"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var reg struct {
		ID string `json:"client_id"`
	}
	json.NewDecoder(r.Body).Decode(&reg)
	r.Body.Close()
	jar, _ := cookiejar.New(nil)
	s := &signIn{hubURL: hubURL, client: reg.ID, redirect: "http://127.0.0.1:45679/callback", verifier: strings.Repeat("w", 48),
		browser: &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
	sum := sha256.Sum256([]byte(s.verifier))
	q := url.Values{"response_type": {"code"}, "client_id": {s.client}, "redirect_uri": {s.redirect}, "state": {"st"},
		"code_challenge": {base64.RawURLEncoding.EncodeToString(sum[:])}, "code_challenge_method": {"S256"}}
	resp, err := s.browser.Get(hubURL + oauth.PathAuthorize + "?" + q.Encode())
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	m := signInCodeRe.FindSubmatch(page)
	req := regexp.MustCompile(`name="req" value="([^"]+)"`).FindSubmatch(page)
	if m == nil || req == nil {
		t.Fatalf("consent page (%d) without a device code:\n%s", resp.StatusCode, page)
	}
	s.code, s.req = string(m[1]), string(req[1])
	return s
}

// finish follows the browser's wait page to the redirect and exchanges the
// code: the token's scope.
func (s *signIn) finish(t *testing.T) string {
	t.Helper()
	r, err := s.browser.Get(s.hubURL + oauth.PathWait + "?" + url.Values{"req": {s.req}, "code": {s.code}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	loc, _ := url.Parse(r.Header.Get("Location"))
	if r.StatusCode != http.StatusSeeOther || loc.Query().Get("code") == "" {
		t.Fatalf("wait page after the approval: %d %s", r.StatusCode, loc)
	}
	tr, err := http.PostForm(s.hubURL+oauth.PathToken, url.Values{"grant_type": {"authorization_code"}, "client_id": {s.client},
		"code": {loc.Query().Get("code")}, "redirect_uri": {s.redirect}, "code_verifier": {s.verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Body.Close()
	var tok struct {
		Access string `json:"access_token"`
		Scope  string `json:"scope"`
	}
	json.NewDecoder(tr.Body).Decode(&tok)
	if !strings.HasPrefix(tok.Access, "rro_") {
		t.Fatalf("token exchange: %d %+v", tr.StatusCode, tok)
	}
	return tok.Scope
}

func apiCode(t *testing.T, err error) (string, string) {
	t.Helper()
	var ae *localapi.APIError
	if !errors.As(err, &ae) {
		t.Fatalf("want a local API error, got %v", err)
	}
	return ae.Code, ae.Message
}

// TestOAuthApprovalThroughLocalAPI: a desktop app approves an MCP client's
// sign-in through the agent's local API (real socket), which asks the real
// hub with the device token: a device enrolled for the project approves
// and the browser gets its code; a device enrolled elsewhere is refused,
// naming the project; a code nobody shows is not_found. Each decision is
// audited with decided_via and the app's pid and executable.
func TestOAuthApprovalThroughLocalAPI(t *testing.T) {
	t.Parallel()
	th := startOAuthHub(t)
	homeA, homeB := t.TempDir(), t.TempDir()
	devA := th.enroll(t, map[string]string{"ROOMRELAY_HOME": homeA}, "p1")
	th.enroll(t, map[string]string{"ROOMRELAY_HOME": homeB}, "p2")
	apiA, auditA := deviceAPI(t, homeA)
	apiB, auditB := deviceAPI(t, homeB)
	ctx := t.Context()
	s := startSignIn(t, th.URL())

	var req hubapi.OAuthApprovalRequest
	_, err := apiA.Do(ctx, http.MethodGet, "oauth/ZZZZ-ZZZZ", nil, &req, nil)
	if code, msg := apiCode(t, err); code != "not_found" || !strings.Contains(msg, "no pending approval has this code") {
		t.Fatalf("a code nobody shows: %s %q", code, msg)
	}
	if _, err := apiA.Do(ctx, http.MethodGet, "oauth/"+strings.ToLower(s.code), nil, &req, nil); err != nil {
		t.Fatal(err)
	}
	if req.ClientName != "Local API test client" || req.ClientVerified || req.RedirectHost != "127.0.0.1:45679" || strings.Join(req.Projects, ",") != "p1" {
		t.Fatalf("what asks: %+v", req)
	}

	var res localapi.OAuthDecideResponse
	_, err = apiB.Do(ctx, http.MethodPost, "oauth/"+s.code, localapi.OAuthDecideRequest{Approve: true, Project: "p1"}, &res, nil)
	if code, msg := apiCode(t, err); code != localapi.CodeForbidden || !strings.Contains(msg, "not enrolled for project p1") {
		t.Fatalf("a device of p2 approving for p1: %s %q", code, msg)
	}
	if _, err := apiA.Do(ctx, http.MethodPost, "oauth/"+s.code, localapi.OAuthDecideRequest{Approve: true}, &res, nil); err != nil {
		t.Fatal(err)
	}
	if !res.Approved || res.Project != "p1" || res.Scope != hubapi.ScopeRead || res.Device != devA.DeviceID || res.DecidedVia != localapi.ViaApp {
		t.Fatalf("approved: %+v", res)
	}
	_, err = apiA.Do(ctx, http.MethodPost, "oauth/"+s.code, localapi.OAuthDecideRequest{Approve: false}, &res, nil)
	if code, _ := apiCode(t, err); code != localapi.CodeConflict && code != "not_found" {
		t.Fatalf("deciding twice: %s", code)
	}
	if scope := s.finish(t); scope != "rooms:read" {
		t.Fatalf("the token's scope: %q", scope)
	}
	grants, err := hubclient.New(th.URL(), "rra_t").OAuthGrants(ctx, "p1")
	if err != nil || len(grants) != 1 || grants[0].ApprovedVia != "device" || grants[0].Device != devA.DeviceID {
		t.Fatalf("grants: %+v %v", grants, err)
	}

	exe, _ := os.Executable()
	line := func(al *audit.Log, decision audit.Decision) audit.Entry {
		t.Helper()
		es, err := al.Query(audit.Filter{})
		if err != nil {
			t.Fatal(err)
		}
		for _, e := range es {
			if e.Command == "localapi.oauth_approve" && e.Decision == decision {
				return e
			}
		}
		t.Fatalf("no %s localapi.oauth_approve line in %+v", decision, es)
		return audit.Entry{}
	}
	ok := line(auditA, audit.Allowed)
	if ok.Project != "p1" || !strings.Contains(ok.Detail, "decided_via=app") || !strings.Contains(ok.Detail, "pid="+strconv.Itoa(os.Getpid())) ||
		!strings.Contains(ok.Detail, filepath.Base(exe)) || !strings.Contains(ok.Detail, `client="oauth-test-app/1"`) {
		t.Errorf("the approval's audit line: %+v", ok)
	}
	if no := line(auditB, audit.Denied); no.ErrorCode != localapi.CodeForbidden || !strings.Contains(no.Detail, "not enrolled") {
		t.Errorf("the refusal's audit line: %+v", no)
	}
}

package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hub/oauth"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// BenchmarkMCPOAuthVsToken measures one read_room round trip through the
// MCP front with an OAuth access token (rro_: token, then grant) beside a
// client token (rrc_), on one hub and one real agent in the same run,
// alternating the two paths so load on the machine hits both alike. It
// reports p50 and p99 per call of each.
//
//	go test -run '^$' -bench MCPOAuthVsToken -benchtime 2000x ./e2e
func BenchmarkMCPOAuthVsToken(b *testing.B) {
	addr := freeLoopbackAddr(b)
	public := "http://" + addr
	th := testhub.Start(b, hub.Config{DataDir: b.TempDir(), AdminToken: adminToken, Heartbeat: 2 * time.Second, Logger: logger(b)},
		testhub.Options{Addr: addr, Handler: func(h *hub.Hub) http.Handler {
			as, err := oauth.New(oauth.Config{Hub: h, PublicURL: public})
			if err != nil {
				panic(err)
			}
			front, err := mcpfront.New(mcpfront.Config{Hub: h, PublicURL: public, OAuth: as, TokenRate: 1_000_000, TokenBurst: 100_000})
			if err != nil {
				panic(err)
			}
			mux := http.NewServeMux()
			as.Mount(mux)
			front.Mount(mux)
			mux.Handle("/", h.Handler())
			return mux
		}})
	h := &runningHub{Hub: th, client: hubclient.New(th.URL(), adminToken)}
	dv := enroll(b, h, "proj-a")
	if err := os.MkdirAll(dv.home+"/config", 0o700); err != nil {
		b.Fatal(err)
	}
	pol := "version 1\nproject proj-a\n  enabled yes\n  commands read_room\n  rate 1000000/min burst 100000\n"
	if err := os.WriteFile(dv.policyPath(), []byte(pol), 0o600); err != nil {
		b.Fatal(err)
	}
	dv.start(b, h.URL())
	seedRoom(b, dv, "proj-a", "room-1")
	waitState(b, h, dv.id, hubapi.StateOnline)
	rrc := clientToken(b, h, "proj-a", hubapi.ScopeRead).Token
	rro := oauthAccessToken(b, h, "proj-a")
	sessions := map[string]*mcp.ClientSession{"rrc": mcpSession(b, h, rrc, nil), "oauth": mcpSession(b, h, rro, nil)}
	eventually(b, "room in the directory", func() bool { return len(listRooms(b, sessions["rrc"])) == 1 })
	call := func(cs *mcp.ClientSession) time.Duration {
		t := time.Now()
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: relay.CmdReadRoom, Arguments: map[string]any{"room_id": "room-1"}})
		d := time.Since(t)
		if err != nil || r.IsError {
			b.Fatalf("read_room: %v %s", err, resultText(r))
		}
		return d
	}
	b.Run("read_room/rrc-vs-oauth", func(b *testing.B) {
		lat := map[string][]time.Duration{}
		for i := range b.N {
			order := []string{"rrc", "oauth"}
			if i%2 == 1 { // alternate which goes first
				order[0], order[1] = order[1], order[0]
			}
			for _, k := range order {
				lat[k] = append(lat[k], call(sessions[k]))
			}
		}
		for _, k := range []string{"rrc", "oauth"} {
			slices.Sort(lat[k])
			b.ReportMetric(float64(lat[k][len(lat[k])/2].Microseconds()), k+"-p50-µs")
			b.ReportMetric(float64(lat[k][len(lat[k])*99/100].Microseconds()), k+"-p99-µs")
		}
		b.ReportMetric(float64(lat["oauth"][len(lat["oauth"])/2])/float64(lat["rrc"][len(lat["rrc"])/2]), "oauth/rrc-p50")
	})
}

// oauthAccessToken runs the authorization as a browser would: an approver's
// login link, the consent page, the decision, the code exchange.
func oauthAccessToken(t testing.TB, h *runningHub, project string) string {
	t.Helper()
	ctx := context.Background()
	login, err := h.client.AddApprover(ctx, hubapi.ApproverRequest{Name: "bench", Projects: []string{project}})
	if err != nil {
		t.Fatal(err)
	}
	r, err := http.Post(h.URL()+"/oauth/register", "application/json", strings.NewReader(`{"redirect_uris":["http://127.0.0.1/cb"]}`))
	if err != nil {
		t.Fatal(err)
	}
	var cl struct {
		ID string `json:"client_id"`
	}
	json.NewDecoder(r.Body).Decode(&cl)
	r.Body.Close()
	jar, _ := cookiejar.New(nil)
	br := &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r, err = br.Get(login.LoginURL); err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	verifier := strings.Repeat("w", 60)
	redirect := "http://127.0.0.1:4444/cb"
	q := url.Values{"response_type": {"code"}, "client_id": {cl.ID}, "redirect_uri": {redirect}, "code_challenge": {pkce(verifier)}, "code_challenge_method": {"S256"}}
	page := get(t, br, h.URL()+"/oauth/authorize?"+q.Encode())
	field := func(n string) string {
		m := regexp.MustCompile(`name="` + n + `" value="([^"]+)"`).FindStringSubmatch(page)
		if m == nil {
			t.Fatalf("no %s on the consent page", n)
		}
		return m[1]
	}
	r, err = br.PostForm(h.URL()+"/oauth/authorize/decision", url.Values{"req": {field("req")}, "csrf": {field("csrf")}, "project": {project}, "access": {"read"}, "action": {"approve"}})
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	loc, _ := url.Parse(r.Header.Get("Location"))
	r, err = http.PostForm(h.URL()+"/oauth/token", url.Values{"grant_type": {"authorization_code"}, "client_id": {cl.ID},
		"code": {loc.Query().Get("code")}, "redirect_uri": {redirect}, "code_verifier": {verifier}})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	var tok struct {
		Access string `json:"access_token"`
	}
	json.NewDecoder(r.Body).Decode(&tok)
	if !strings.HasPrefix(tok.Access, "rro_") {
		t.Fatalf("no access token (%d)", r.StatusCode)
	}
	return tok.Access
}

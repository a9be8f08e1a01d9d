package mcpfront

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// forwarded sends each request as a proxy would: X-Forwarded-For and
// X-Forwarded-Proto set, and the bearer token if any.
type forwarded struct{ addr, token string }

func (f forwarded) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", f.addr)
	r.Header.Set("X-Forwarded-Proto", "https")
	if f.token != "" {
		r.Header.Set("Authorization", "Bearer "+f.token)
	}
	return http.DefaultTransport.RoundTrip(r)
}

// TestFrontSeesTheForwardedClient: behind a trusted proxy the front logs
// the client address the proxy forwarded (refused tokens and tool calls),
// and its metadata names the https URL the proxy serves; from an untrusted
// peer neither header is believed.
func TestFrontSeesTheForwardedClient(t *testing.T) {
	for _, trusted := range []bool{true, false} {
		var proxies []netip.Prefix
		if trusted {
			proxies = []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}
		}
		var logs testutil.SyncBuffer
		srv := serveFront(t, hub.Config{TrustedProxies: proxies}, Config{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
		ctx := context.Background()

		const client = "198.51.100.7"
		want := "client=" + client
		if !trusted {
			want = "client=127.0.0.1"
		}
		req, _ := http.NewRequest(http.MethodPost, srv.URL()+Path, strings.NewReader("{}"))
		resp, err := (&http.Client{Transport: forwarded{addr: client, token: "rrc_bogus"}}).Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized {
			t.Fatalf("trusted=%v: a bogus token: %d", trusted, resp.StatusCode)
		}
		if l := logs.String(); !strings.Contains(l, "refused a client token") || !strings.Contains(l, want) {
			t.Errorf("trusted=%v: the refusal log does not carry %s:\n%s", trusted, want, l)
		}

		tok, err := hubclient.New(srv.URL(), admin).CreateClientToken(ctx, "p1", hubapi.ScopeRead, "")
		if err != nil {
			t.Fatal(err)
		}
		mc := mcp.NewClient(&mcp.Implementation{Name: "proxy-test", Version: "1"}, nil)
		cs, err := mc.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: srv.URL() + Path,
			HTTPClient: &http.Client{Transport: forwarded{addr: client, token: tok.Token}}}, nil)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: ToolListLocalRooms, Arguments: map[string]any{}}); err != nil {
			t.Fatal(err)
		}
		cs.Close()
		var line string
		for _, l := range strings.Split(logs.String(), "\n") {
			if strings.Contains(l, "tools/call") {
				line = l
			}
		}
		if !strings.Contains(line, want) {
			t.Errorf("trusted=%v: the tools/call log does not carry %s: %q", trusted, want, line)
		}

		resp, err = (&http.Client{Transport: forwarded{addr: client}}).Get(srv.URL() + MetadataPath)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if got := strings.Contains(string(body), `"resource":"https://`); got != trusted {
			t.Errorf("trusted=%v: metadata %s", trusted, body)
		}
	}
}

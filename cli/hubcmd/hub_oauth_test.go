package hubcmd

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/internal/testutil"
)

// startHubCmd runs `roomrelay hub --home HOME --listen ADDR extra...` in
// this process until the test ends; it returns the home and the hub's URL.
func startHubCmd(t *testing.T, listen string, extra ...string) (home, url string) {
	t.Helper()
	home = t.TempDir()
	if listen == "" {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		listen = ln.Addr().String()
		ln.Close()
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	var hubErr testutil.SyncBuffer
	go func() {
		e := &cli.Env{Stdout: &testutil.SyncBuffer{}, Stderr: &hubErr, Getenv: func(string) string { return "" }}
		done <- cli.Main(ctx, append([]string{"hub", "--home", home, "--listen", listen}, extra...), e)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
		if t.Failed() {
			t.Logf("hub output:\n%s", hubErr.String())
		}
	})
	testutil.Eventually(t, "the hub wrote its URL", func() bool {
		return strings.Contains(readFile(filepath.Join(home, "data", "hub", "hub-url")), listen)
	})
	return home, "http://" + listen
}

// TestLoopbackHubIsItsOwnIssuer: `roomrelay hub` on loopback with no
// --public-url (the README's two-terminal hub) serves OAuth with its listen
// address as issuer: what `claude mcp add --transport http roomrelay
// http://127.0.0.1:7780/mcp` needs, and the operator's OAuth commands work.
func TestLoopbackHubIsItsOwnIssuer(t *testing.T) {
	home, url := startHubCmd(t, "")
	resp, err := http.Post(url+"/mcp", "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized || !strings.Contains(resp.Header.Get("WWW-Authenticate"), "resource_metadata=") {
		t.Fatalf("POST /mcp without a token: %d %q, want 401 naming the resource metadata", resp.StatusCode, resp.Header.Get("WWW-Authenticate"))
	}
	resp, err = http.Get(url + "/.well-known/oauth-authorization-server")
	if err != nil {
		t.Fatal(err)
	}
	var md struct {
		Issuer       string `json:"issuer"`
		Registration string `json:"registration_endpoint"`
	}
	err = json.NewDecoder(resp.Body).Decode(&md)
	resp.Body.Close()
	if err != nil || resp.StatusCode != http.StatusOK || md.Issuer != url {
		t.Fatalf("AS metadata: %d %+v %v, want issuer %s", resp.StatusCode, md, err, url)
	}
	// Claude Code registers its loopback callback with a port.
	resp, err = http.Post(md.Registration, "application/json", strings.NewReader(
		`{"redirect_uris":["http://localhost:54545/callback"],"client_name":"Claude Code (roomrelay)","token_endpoint_auth_method":"none","grant_types":["authorization_code","refresh_token"],"response_types":["code"]}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusCreated {
		t.Fatalf("registration: %d, want 201", resp.StatusCode)
	}
	code, out, errs := run(t, nil, "hub", "approver", "add", "alice", "--project", "p1", "--home", home)
	if code != 0 || !strings.Contains(out, url+"/oauth/login") {
		t.Fatalf("hub approver add: %d %q %q, want a login link on %s", code, out, errs, url)
	}
	if code, out, errs := run(t, nil, "hub", "oauth", "grants", "--home", home); code != 0 {
		t.Fatalf("hub oauth grants: %d %q %q", code, out, errs)
	}
}

// TestOAuthOffCommandsSayHow: on a hub without OAuth the operator's OAuth
// commands and the device approval say how to turn it on, not "404 page
// not found".
func TestOAuthOffCommandsSayHow(t *testing.T) {
	home, url := startHubCmd(t, "", "--oauth=false")
	for _, args := range [][]string{
		{"hub", "approver", "add", "alice", "--project", "p1"},
		{"hub", "approver", "list"},
		{"hub", "oauth", "grants"},
		{"hub", "oauth", "clients"},
	} {
		code, out, errs := run(t, nil, append(args, "--home", home)...)
		if code == 0 || !strings.Contains(errs, "OAuth is off on this hub: start it with --public-url URL") || strings.Contains(errs, "page not found") {
			t.Errorf("%v: exit %d, stdout %q, stderr %q; want the OAuth-off hint", args, code, out, errs)
		}
	}
	for _, p := range []string{"/.well-known/oauth-authorization-server", "/oauth/register", "/v1/oauth/device-approvals/BCDF-GHJK"} {
		resp, err := http.Post(url+p, "application/json", strings.NewReader("{}"))
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Error struct{ Code, Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound || body.Error.Code != "oauth_off" {
			t.Errorf("POST %s: %d %+v, want 404 oauth_off", p, resp.StatusCode, body)
		}
	}
}

type fakeListener struct {
	net.Listener
	addr net.Addr
}

func (l fakeListener) Addr() net.Addr { return l.addr }

// TestLoopbackURL: only a loopback listener makes its own issuer; a
// wildcard or public one has none (OAuth then needs --public-url).
func TestLoopbackURL(t *testing.T) {
	for _, c := range []struct {
		listen string
		ip     string
		tls    bool
		want   string
	}{
		{"127.0.0.1:7780", "127.0.0.1", false, "http://127.0.0.1:7780"},
		{"127.0.0.1:7780", "127.0.0.1", true, "https://127.0.0.1:7780"},
		{"[::1]:7780", "::1", false, "http://[::1]:7780"},
		{"localhost:7780", "127.0.0.1", false, "http://localhost:7780"},
		{"0.0.0.0:7780", "0.0.0.0", false, ""},
		{":7780", "::", false, ""},
		{"192.0.2.10:7780", "192.0.2.10", false, ""},
	} {
		ln := fakeListener{addr: &net.TCPAddr{IP: net.ParseIP(c.ip), Port: 7780}}
		if got := loopbackURL(c.listen, ln, c.tls); got != c.want {
			t.Errorf("loopbackURL(%q on %s, tls %v) = %q, want %q", c.listen, c.ip, c.tls, got, c.want)
		}
	}
}

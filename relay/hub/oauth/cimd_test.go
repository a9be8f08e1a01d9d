package oauth

import (
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// docServer is an httptest TLS server publishing client ID metadata
// documents, counting fetches per path.
type docServer struct {
	*httptest.Server
	mu   sync.Mutex
	hits map[string]int
}

func (d *docServer) count(path string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.hits[path]
}

func startDocServer(t *testing.T) *docServer {
	t.Helper()
	d := &docServer{hits: map[string]int{}}
	doc := func(path string, extra map[string]any) []byte {
		m := map[string]any{"client_id": d.URL + path, "client_name": "CIMD client", "redirect_uris": []string{"http://127.0.0.1/callback"}}
		for k, v := range extra {
			m[k] = v
		}
		b, _ := json.Marshal(m)
		return b
	}
	d.Server = httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		d.mu.Lock()
		d.hits[r.URL.Path]++
		d.mu.Unlock()
		js := func(b []byte) {
			w.Header().Set("Content-Type", "application/json")
			w.Write(b)
		}
		switch r.URL.Path {
		case "/good.json":
			w.Header().Set("Cache-Control", "max-age=60")
			js(doc(r.URL.Path, nil))
		case "/nostore.json":
			w.Header().Set("Cache-Control", "no-store")
			js(doc(r.URL.Path, nil))
		case "/redirect.json":
			http.Redirect(w, r, "/good.json", http.StatusFound)
		case "/big.json":
			js(doc(r.URL.Path, map[string]any{"logo_uri": "https://x.example/" + strings.Repeat("a", 6<<10)}))
		case "/html.json":
			w.Header().Set("Content-Type", "text/html")
			w.Write(doc(r.URL.Path, nil))
		case "/garbage.json":
			js([]byte("<html>not json</html>"))
		case "/mismatch.json":
			js(doc("/someone-else.json", nil))
		case "/evil-redirect.json":
			js(doc(r.URL.Path, map[string]any{"redirect_uris": []string{"https://evil.example/callback"}}))
		case "/secret.json":
			js(doc(r.URL.Path, map[string]any{"token_endpoint_auth_method": "client_secret_basic"}))
		case "/slow.json":
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(d.Close)
	return d
}

// cimdOn turns CIMD on for the doc server's host.
func cimdOn(d *docServer, allowPrivate bool) func(*Config) {
	return func(c *Config) {
		pool := x509.NewCertPool()
		pool.AddCert(d.Certificate())
		c.CIMDHosts = []string{"127.0.0.1"}
		c.cimdRoots = pool
		c.cimdAllowPrivate = allowPrivate
		c.cimdTimeout = 300 * time.Millisecond
	}
}

// TestCIMDOffByDefault: without CIMD hosts the metadata does not advertise
// it and a URL client_id is an unknown client, never fetched.
func TestCIMDOffByDefault(t *testing.T) {
	d := startDocServer(t)
	ta := startAS(t, nil)
	md := do(t, http.DefaultClient, http.MethodGet, ta.url+PathASMetadata, nil).json(t)
	if _, ok := md["client_id_metadata_document_supported"]; ok {
		t.Errorf("CIMD advertised while off: %v", md)
	}
	r := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: d.URL + "/good.json", redirect: "http://127.0.0.1:5555/callback"}), nil)
	if r.status != 400 || !strings.Contains(r.body, "client the hub does not know") || d.count("/good.json") != 0 {
		t.Fatalf("a URL client_id with CIMD off: %d (fetched %d times)\n%s", r.status, d.count("/good.json"), r.body)
	}
}

// TestCIMDFlow: with the doc server's host allowed, the metadata says so, a
// client whose client_id is its document's URL gets the consent page
// (naming the publishing host), approval, and a token; the document is
// fetched once while its max-age holds, and every time with no-store.
func TestCIMDFlow(t *testing.T) {
	d := startDocServer(t)
	ta := startAS(t, cimdOn(d, true))
	md := do(t, http.DefaultClient, http.MethodGet, ta.url+PathASMetadata, nil).json(t)
	if md["client_id_metadata_document_supported"] != true {
		t.Fatalf("CIMD not advertised: %v", md)
	}
	client := d.URL + "/good.json"
	redirect := "http://127.0.0.1:5556/callback"
	c := browser(t)
	ta.signIn(c, hubapi.ScopeWrite, "p1")
	page := do(t, c, http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: redirect}), nil)
	if page.status != 200 || !strings.Contains(page.body, "as published by <strong>127.0.0.1</strong>") || strings.Contains(page.body, "unverified") {
		t.Fatalf("consent page for a CIMD client: %d\n%s", page.status, page.body)
	}
	q := ta.approve(c, authReq{client: client, redirect: redirect}, "p1", "read")
	tr := ta.exchange(client, q.Get("code"), redirect)
	if tr.status != 200 || !strings.HasPrefix(tr.json(t)["access_token"].(string), "rro_") {
		t.Fatalf("exchange for a CIMD client: %d %s", tr.status, tr.body)
	}
	if n := d.count("/good.json"); n != 1 {
		t.Errorf("a cached document was fetched %d times", n)
	}
	if r := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: client, redirect: "https://evil.example/callback"}), nil); r.status != 400 {
		t.Errorf("a redirect the document does not list: %d", r.status)
	}
	for range 2 {
		if r := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: d.URL + "/nostore.json", redirect: redirect}), nil); r.status != 200 {
			t.Fatalf("no-store document: %d %s", r.status, r.body)
		}
	}
	if n := d.count("/nostore.json"); n != 2 {
		t.Errorf("a no-store document was fetched %d times, want 2", n)
	}
	gs, _ := ta.as.Grants(t.Context(), "p1")
	if len(gs) != 1 || gs[0].ClientID != client {
		t.Errorf("grants: %+v", gs)
	}
}

// TestCIMDRefusals: each SSRF and validation rule refuses its document
// with a local error page naming the rule (never a redirect).
func TestCIMDRefusals(t *testing.T) {
	d := startDocServer(t)
	ta := startAS(t, cimdOn(d, true))
	port := d.URL[strings.LastIndex(d.URL, ":")+1:]
	cases := []struct{ name, client, want string }{
		{"a host not on the list", "https://localhost:" + port + "/good.json", "fetched only from hosts"},
		{"a redirect", d.URL + "/redirect.json", "redirects are not followed"},
		{"over the size cap", d.URL + "/big.json", "over 5120 bytes"},
		{"not JSON by type", d.URL + "/html.json", "not JSON"},
		{"not JSON by body", d.URL + "/garbage.json", "not a JSON client metadata object"},
		{"client_id mismatch", d.URL + "/mismatch.json", "is not its own URL"},
		{"a redirect URI registration refuses", d.URL + "/evil-redirect.json", "evil.example is not one"},
		{"a confidential client", d.URL + "/secret.json", "only public clients"},
		{"no answer in time", d.URL + "/slow.json", "could not be fetched"},
		{"a query", d.URL + "/good.json?x=1", "must not have a query"},
		{"no path", d.URL + "/", "must have a path"},
		{"dot segments", d.URL + "/a/../good.json", "must not have . or .. path segments"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: tc.client, redirect: "http://127.0.0.1:5557/callback"}), nil)
			if r.status != 400 || r.header.Get("Location") != "" || !strings.Contains(r.body, tc.want) {
				t.Fatalf("%s: %d %q, want a local error with %q\n%s", tc.client, r.status, r.header.Get("Location"), tc.want, r.body)
			}
		})
	}
}

// TestCIMDPrivateAddressRefused: without the test hook, an allowed host
// that resolves to a loopback address is refused at dial time (the SSRF
// guard holds whatever the name says).
func TestCIMDPrivateAddressRefused(t *testing.T) {
	d := startDocServer(t)
	ta := startAS(t, cimdOn(d, false))
	r := do(t, browser(t), http.MethodGet, ta.authorizeURL(authReq{client: d.URL + "/good.json", redirect: "http://127.0.0.1:5558/callback"}), nil)
	if r.status != 400 || !strings.Contains(r.body, "loopback, private or link-local address") || d.count("/good.json") != 0 {
		t.Fatalf("a loopback document host: %d (fetched %d)\n%s", r.status, d.count("/good.json"), r.body)
	}
}

// TestCIMDCacheBounded: the cache holds at most cimdMaxEntries documents;
// past that the one closest to expiry goes.
func TestCIMDCacheBounded(t *testing.T) {
	f := &cimdFetcher{cache: map[string]cimdEntry{}}
	now := time.Now()
	for i := range cimdMaxEntries + 50 {
		f.put(fmt.Sprintf("https://h.example/%d", i), cimdEntry{c: &clientRec{}, expires: now.Add(time.Hour + time.Duration(i)*time.Second)}, now)
	}
	if n := len(f.cache); n != cimdMaxEntries {
		t.Fatalf("cache holds %d entries, bound %d", n, cimdMaxEntries)
	}
	if _, ok := f.cache["https://h.example/0"]; ok {
		t.Error("the entry closest to expiry was kept")
	}
	if _, ok := f.cache[fmt.Sprintf("https://h.example/%d", cimdMaxEntries+49)]; !ok {
		t.Error("the newest entry was dropped")
	}
}

package mcpfront

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// batch is a JSON-RPC batch of n tools/list requests.
func batch(n int) []byte {
	var b bytes.Buffer
	b.WriteByte('[')
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"jsonrpc":"2.0","id":%d,"method":"tools/list"}`, i+1)
	}
	b.WriteByte(']')
	return b.Bytes()
}

func post(t *testing.T, url, token, host string, body []byte) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url+Path, bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if host != "" {
		req.Host = host
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestOneBatchHoldsLittle: a batch of 20,000 tools/list (no protocol
// header, so the SDK would accept it) is refused before the SDK starts a
// goroutine per message, while the client reads nothing; a batch of
// MaxBatch is served.
func TestOneBatchHoldsLittle(t *testing.T) {
	fh := startFront(t, Config{})
	base := runtime.NumGoroutine()
	body := batch(20_000)
	conn, err := net.Dial("tcp", strings.TrimPrefix(fh.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: %s\r\nAuthorization: Bearer %s\r\nContent-Type: application/json\r\nAccept: application/json, text/event-stream\r\nContent-Length: %d\r\n\r\n",
		Path, strings.TrimPrefix(fh.url, "http://"), fh.read, len(body))
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	// The client reads nothing: look at what the hub holds meanwhile.
	peak := 0
	for range 20 {
		peak = max(peak, runtime.NumGoroutine()-base)
		time.Sleep(20 * time.Millisecond)
	}
	if peak > 100 {
		t.Errorf("one batch POST started %d goroutines", peak)
	}
	buf := make([]byte, 512)
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, _ := conn.Read(buf)
	if got := string(buf[:n]); !strings.HasPrefix(got, "HTTP/1.1 400") || !strings.Contains(got, "batch bound") {
		t.Errorf("a batch of 20000: %q", got)
	}
	if code, body := post(t, fh.url, fh.read, "", batch(MaxBatch)); code != http.StatusOK || strings.Count(body, `"tools"`) != MaxBatch {
		t.Errorf("a batch of %d: %d %.200s", MaxBatch, code, body)
	}
}

// TestEveryMessageCounts: tools/list (and any message that is not a known
// tool's call) counts against the token's limit, one per message of a
// batch; tools/call counts once, in the tool.
func TestEveryMessageCounts(t *testing.T) {
	fh := startFront(t, Config{TokenRate: 1, TokenBurst: 10})
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	if code, body := post(t, fh.url, fh.read, "", batch(8)); code != http.StatusOK {
		t.Fatalf("batch of 8: %d %.200s", code, body)
	}
	if code, body := post(t, fh.url, fh.read, "", list); code != http.StatusOK {
		t.Fatalf("9th message: %d %.200s", code, body)
	}
	if code, body := post(t, fh.url, fh.read, "", batch(2)); code != http.StatusTooManyRequests || !strings.Contains(body, "rate_limited") {
		t.Fatalf("11th message (a batch of 2 with one left): %d %.200s", code, body)
	}
	call := []byte(`{"jsonrpc":"2.0","id":2,"method":"tools/call","params":{"name":"list_local_rooms","arguments":{}}}`)
	code, body := post(t, fh.url, fh.read, "", call)
	if code != http.StatusOK || strings.Contains(body, `"isError":true`) {
		t.Fatalf("10th message (a tool call): %d %.200s", code, body)
	}
	code, body = post(t, fh.url, fh.read, "", call)
	if code != http.StatusOK || !strings.Contains(body, `"text":"rate_limited: `) || !strings.Contains(body, `"isError":true`) {
		t.Fatalf("11th message (a tool call): %d %.300s", code, body)
	}
	if code, _ := post(t, fh.url, fh.write, "", list); code != http.StatusOK {
		t.Fatalf("another token was limited: %d", code)
	}
}

// TestHostRule: a non-loopback Host on a loopback socket is the
// DNS-rebinding case (refused), unless a trusted proxy forwards the
// --public-url host.
func TestHostRule(t *testing.T) {
	list := []byte(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`)
	for _, c := range []struct {
		name    string
		proxies []netip.Prefix
		public  string
		host    string
		want    int
	}{
		{"loopback name", nil, "", "localhost:1", http.StatusOK},
		{"rebound name, no proxy", nil, "https://hub.example.com", "hub.example.com", http.StatusForbidden},
		{"rebound name through the proxy", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "https://hub.example.com", "evil.example", http.StatusForbidden},
		{"proxy, no public url", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "", "hub.example.com", http.StatusForbidden},
		{"proxy with the public host", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "https://hub.example.com", "hub.example.com", http.StatusOK},
		{"proxy with the public host and a port", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, "https://hub.example.com:8443/", "HUB.example.com:8443", http.StatusOK},
	} {
		srv := serveFront(t, hub.Config{TrustedProxies: c.proxies}, Config{PublicURL: c.public})
		tok, err := hubclient.New(srv.URL(), admin).CreateClientToken(context.Background(), "p1", hubapi.ScopeRead, "")
		if err != nil {
			t.Fatal(err)
		}
		if code, body := post(t, srv.URL(), tok.Token, c.host, list); code != c.want {
			t.Errorf("%s: %d %.200s, want %d", c.name, code, body, c.want)
		}
	}
}

// TestBodyBound: a POST body is read whole up to MaxBodyBytes, whether its
// Content-Length lets the guard reserve its buffer up front (up to
// presizeMax) or not; past the bound it is refused with 413, naming it.
func TestBodyBound(t *testing.T) {
	fh := startFront(t, Config{})
	padded := func(size int) []byte {
		head := `{"jsonrpc":"2.0","id":1,"method":"tools/list"`
		return []byte(head + strings.Repeat(" ", size-len(head)-1) + "}")
	}
	for _, size := range []int{200, presizeMax - 1, presizeMax, presizeMax + 1, 1 << 20} {
		status, body := post(t, fh.url, fh.read, "", padded(size))
		if status != http.StatusOK || !strings.Contains(body, `"read_room"`) {
			t.Errorf("a tools/list of %d bytes: %d %.200s", size, status, body)
		}
	}
	status, body := post(t, fh.url, fh.read, "", padded(MaxBodyBytes+1))
	if status != http.StatusRequestEntityTooLarge || !strings.Contains(body, "body bound") {
		t.Errorf("a body past the bound: %d %.200s", status, body)
	}
}

package localapi

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// TestMain doubles as the client run as another user: with
// RR_LOCALAPI_PEER_SOCKET set, the binary GETs status on that socket and
// prints the outcome ("dial: …" or "status NNN code").
//
// With RR_LOCALAPI_PEER_LISTEN set it is a server run as another user: it
// listens on that socket (mode 0666) and answers every request 200.
func TestMain(m *testing.M) {
	if path := os.Getenv("RR_LOCALAPI_PEER_SOCKET"); path != "" {
		os.Exit(peerClient(path))
	}
	if path := os.Getenv("RR_LOCALAPI_PEER_LISTEN"); path != "" {
		os.Exit(peerServer(path))
	}
	os.Exit(m.Run())
}

func peerServer(path string) int {
	ln, err := net.Listen("unix", path)
	if err != nil {
		fmt.Println(err)
		return 1
	}
	os.Chmod(path, 0o666)
	http.Serve(ln, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "{}") }))
	return 0
}

// peerClient is a hostile client: a plain dial, none of the client's
// checks of whose the socket is.
func peerClient(path string) int {
	var d net.Dialer
	c, err := d.DialContext(context.Background(), "unix", path)
	if err != nil {
		fmt.Printf("dial: %v\n", err)
		return 0
	}
	defer c.Close()
	fmt.Fprintf(c, "GET /localapi/v1/status HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", Host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		fmt.Printf("read: %v\n", err)
		return 1
	}
	b, _ := io.ReadAll(resp.Body)
	fmt.Printf("status %d %s\n", resp.StatusCode, b)
	return 0
}

func TestStatusOverTheSocket(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	var st StatusResponse
	hdr, err := ta.client.Do(context.Background(), "GET", "status", nil, &st, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st.State != "online" || st.DeviceID != "dev_1" || st.API.Version != APIVersion || st.BootID != ta.srv.Events().BootID() {
		t.Fatalf("status = %+v", st)
	}
	if st.PendingProposals != 0 || st.Provider.Connected {
		t.Fatalf("status = %+v", st)
	}
	if hdr.Get(HeaderAPIVersion) != APIVersion || hdr.Get(HeaderVersion) != "test" {
		t.Fatalf("version headers: %v", hdr)
	}
	if runtime.GOOS == "windows" {
		return // a pipe has no file mode: pipe_windows_test.go checks it
	}
	fi, err := os.Stat(ta.srv.Endpoint().Path)
	if err != nil || fi.Mode().Perm() != 0o600 || fi.Mode().Type() != os.ModeSocket {
		t.Fatalf("socket mode: %v %v", fi.Mode(), err)
	}
	di, _ := os.Stat(filepath.Dir(ta.srv.Endpoint().Path))
	if di.Mode().Perm() != 0o700 {
		t.Fatalf("socket dir mode %v", di.Mode())
	}
}

// osTransport is the transport Listen uses on this OS.
func osTransport() string {
	if runtime.GOOS == "windows" {
		return TransportNpipe
	}
	return TransportUnix
}

func TestDiscoveryFile(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	var d Discovery
	deadline := time.Now().Add(5 * time.Second)
	for {
		var err error
		if d, err = ReadDiscovery(ta.cfg.ConfigDir); err == nil || time.Now().After(deadline) {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}
	if d.Transport != osTransport() || d.Path != ta.srv.Endpoint().Path || d.PID != os.Getpid() ||
		d.BootID != ta.srv.Events().BootID() || d.API != APIVersion {
		t.Fatalf("discovery = %+v", d)
	}
	// Go on Windows reports 0666 for any writable file: the mode says
	// nothing there.
	fi, err := os.Stat(filepath.Join(ta.cfg.ConfigDir, DiscoveryFile))
	if err != nil || (runtime.GOOS != "windows" && fi.Mode().Perm() != 0o600) {
		t.Fatalf("discovery file mode: %v %v", fi, err)
	}
	c, _, err := Discover(context.Background(), ta.cfg.ConfigDir)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	ta.stop()
	if _, err := os.Stat(filepath.Join(ta.cfg.ConfigDir, DiscoveryFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("discovery file after a clean exit: %v", err)
	}
	if _, _, err := Discover(context.Background(), ta.cfg.ConfigDir); !errors.Is(err, ErrNotRunning) {
		t.Fatalf("Discover after exit: %v", err)
	}
}

func TestBrowserShapedRequestsRefused(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	for _, tc := range []struct {
		name   string
		hdr    map[string]string
		status int
		code   string
	}{
		{"origin", map[string]string{"Origin": "https://evil.example"}, 403, CodeForbidden},
		{"referer", map[string]string{"Referer": "https://evil.example/page"}, 403, CodeForbidden},
		{"host", map[string]string{"Host": "evil.example"}, 403, CodeForbidden},
	} {
		status, hdr, body := ta.raw("GET", "/localapi/v1/status", tc.hdr, "")
		if status != tc.status || errCode(body) != tc.code {
			t.Errorf("%s: %d %v", tc.name, status, body)
		}
		if hdr.Get(HeaderAPIVersion) != APIVersion {
			t.Errorf("%s: no version header on a refusal", tc.name)
		}
	}
	for _, h := range []string{"", "localhost", "roomrelay.local:80"} {
		if status, _, body := ta.raw("GET", "/localapi/v1/status", map[string]string{"Host": h}, ""); status != 200 {
			t.Errorf("Host %q: %d %v", h, status, body)
		}
	}
	lines := ta.auditLines("localapi.refused")
	if len(lines) != 3 {
		t.Fatalf("audited refusals = %d, want 3: %+v", len(lines), lines)
	}
	want := fmt.Sprintf("uid=%d pid=%d", os.Getuid(), os.Getpid())
	if !strings.Contains(lines[0].Detail, want) || lines[0].ErrorCode != CodeForbidden {
		t.Fatalf("audit line %+v does not name the peer (%s)", lines[0], want)
	}
	big := strings.Repeat("x", DefaultMaxBody+1)
	if status, _, body := ta.raw("POST", "/localapi/v1/projects/p/enable", nil, big); status != 413 || errCode(body) != CodeTooLarge {
		t.Fatalf("big body: %d %v", status, body)
	}
	status, _, body := ta.raw("GET", "/localapi/v2/status", nil, "")
	if status != 404 || errCode(body) != CodeUnsupportedAPIVersion {
		t.Fatalf("v2: %d %v", status, body)
	}
	if status, _, body := ta.raw("GET", "/localapi/v1/nope", nil, ""); status != 404 || errCode(body) != "not_found" {
		t.Fatalf("unknown route: %d %v", status, body)
	}
}

func TestRefusalsAreRateLimited(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	limited := 0
	for range RefusalBurst + 5 {
		status, _, _ := ta.raw("GET", "/localapi/v1/status", map[string]string{"Origin": "null"}, "")
		if status == http.StatusTooManyRequests {
			limited++
		}
	}
	if n := len(ta.auditLines("localapi.refused")); n != RefusalBurst || limited < 4 {
		t.Fatalf("audited %d refusals (want %d), %d rate limited", n, RefusalBurst, limited)
	}
}

func TestProviderRoute(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, nil)
	if status, _, body := ta.raw("GET", "/localapi/v1/provider", nil, ""); status != 503 || errCode(body) != CodeUnavailable {
		t.Fatalf("no provider handler: %d %v", status, body)
	}
	tb := startAPI(t, func(c *Config) {
		c.ProviderHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, ok := PeerFrom(r.Context())
			fmt.Fprintf(w, `{"peer_uid":%d,"ok":%v}`, p.UID, ok)
		})
	})
	status, _, body := tb.raw("GET", "/localapi/v1/provider", nil, "")
	if status != 200 || body["ok"] != true || int(body["peer_uid"].(float64)) != os.Getuid() {
		t.Fatalf("provider handler: %d %v", status, body)
	}
	// The rules run before the provider's handler.
	if status, _, _ := tb.raw("GET", "/localapi/v1/provider", map[string]string{"Origin": "https://evil.example"}, ""); status != 403 {
		t.Fatalf("browser to provider: %d", status)
	}
}

func TestConnectionCap(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.MaxConns = 2 })
	var held []net.Conn
	for range 2 {
		c, err := dialRaw(ta.srv.Endpoint())
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	// Accept runs in the server's goroutine: wait until both are counted.
	testutil.Eventually(t, "both connections counted", func() bool { return ta.srv.conns.Load() == 2 })
	c, err := dialRaw(ta.srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil || resp.StatusCode != 503 {
		t.Fatalf("third connection: %v %v", resp, err)
	}
	c.Close()
	for _, h := range held {
		h.Close()
	}
	// Slots come back.
	testutil.Eventually(t, "the slots back", func() bool { return ta.srv.conns.Load() == 0 })
	if _, err := ta.client.Do(context.Background(), "GET", "status", nil, nil, nil); err != nil {
		t.Fatalf("after the held connections closed: %v", err)
	}
}

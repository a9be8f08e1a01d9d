package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// needNginx finds the nginx binary: on PATH or in /usr/sbin (Debian's,
// not on a user's PATH). Missing, the test skips, unless
// ROOMRELAY_REQUIRE_NGINX=1 (CI), where it fails.
func needNginx(t *testing.T) string {
	t.Helper()
	if p, err := exec.LookPath("nginx"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	if os.Getenv("ROOMRELAY_REQUIRE_NGINX") == "1" {
		t.Fatal("nginx is not installed (ROOMRELAY_REQUIRE_NGINX=1): apt-get install nginx")
	}
	t.Skip("nginx is not installed; set ROOMRELAY_REQUIRE_NGINX=1 to fail instead")
	return ""
}

// nginxConf is the reverse proxy of docs/cluster.md, reduced to one hub:
// TLS with a private-CA certificate on listen, plain HTTP to the hub on
// loopback, the websocket upgrade passed through, X-Forwarded-For
// appended, and a read timeout above 2.5 heartbeats (the hub's pings keep
// an idle agent's socket busier than that).
const nginxConf = `worker_processes 1;
pid {{dir}}/nginx.pid;
error_log {{dir}}/error.log warn;
events { worker_connections 256; }
http {
    access_log {{dir}}/access.log;
    client_body_temp_path {{dir}}/tmp/body;
    proxy_temp_path {{dir}}/tmp/proxy;
    fastcgi_temp_path {{dir}}/tmp/fastcgi;
    uwsgi_temp_path {{dir}}/tmp/uwsgi;
    scgi_temp_path {{dir}}/tmp/scgi;

    map $http_upgrade $connection_upgrade {
        default upgrade;
        ''      close;
    }
    upstream roomrelay_hub {
        server {{hub}};
    }
    server {
        listen {{listen}} ssl;
        ssl_certificate {{dir}}/cert.pem;
        ssl_certificate_key {{dir}}/key.pem;
        ssl_protocols TLSv1.2 TLSv1.3;

        location / {
            proxy_pass http://roomrelay_hub;
            proxy_http_version 1.1;
            proxy_set_header Upgrade $http_upgrade;
            proxy_set_header Connection $connection_upgrade;
            proxy_set_header Host $host;
            proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;
            proxy_set_header X-Forwarded-Proto $scheme;
            proxy_read_timeout {{read_timeout}};
            proxy_send_timeout {{read_timeout}};
            proxy_buffering off;
        }
    }
}
`

// startNginx runs nginx in the foreground as a child process until the
// test ends, and waits until it accepts connections.
func startNginx(t *testing.T, bin, dir string, vars map[string]string) {
	t.Helper()
	conf := nginxConf
	for k, v := range vars {
		conf = strings.ReplaceAll(conf, "{{"+k+"}}", v)
	}
	conf = strings.ReplaceAll(conf, "{{dir}}", dir)
	if err := os.MkdirAll(filepath.Join(dir, "tmp"), 0o755); err != nil {
		t.Fatal(err)
	}
	// Run as root, nginx's workers drop to an unprivileged user, which must
	// reach the temp directories.
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	cmd := exec.Command(bin, "-p", dir, "-c", "nginx.conf", "-e", "stderr", "-g", "daemon off;")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatalf("start nginx: %v", err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(os.Interrupt) // nginx: SIGINT is a fast shutdown
		select {
		case <-exited:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			errLog, _ := os.ReadFile(filepath.Join(dir, "error.log"))
			t.Logf("nginx output:\n%s\nerror.log:\n%s", out.String(), errLog)
		}
	})
	eventually(t, "nginx listening", func() bool {
		select {
		case <-exited:
			t.Fatalf("nginx exited: %s", out.String())
		default:
		}
		c, err := net.Dial("tcp", vars["listen"])
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

// publicHost is the hub's public name in the nginx test: not a loopback
// name, as in a real deployment; the test's clients dial nginx's loopback
// address for it.
const publicHost = "hub.roomrelay.test"

// mcpThroughNginx: /mcp through nginx on the same host, which forwards the
// public Host to the hub's loopback socket, serves a tool call (the
// go-sdk's DNS-rebinding check refused exactly this with 403), while a
// browser reaching the hub's loopback port directly under a rebound name
// is still refused.
func mcpThroughNginx(t *testing.T, runCmd func(string, ...string) (int, string), hubHome, hubAddr, ngxAddr, publicURL, proxied, caFile string, caPEM []byte) {
	t.Helper()
	code, out := runCmd(hubHome, "hub", "token", "create", "--project", "proj-a", "--scope", "read", "--hub", proxied, "--ca-file", caFile, "--json")
	var tok struct{ Token string }
	if code != 0 || json.Unmarshal([]byte(out), &tok) != nil || tok.Token == "" {
		t.Fatalf("hub token create through nginx: %d %s", code, out)
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	toNginx := &http.Transport{
		DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, network, ngxAddr)
		},
		TLSClientConfig: &tls.Config{RootCAs: roots},
	}
	mc := mcp.NewClient(&mcp.Implementation{Name: "nginx-e2e", Version: "1"}, nil)
	cs, err := mc.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: publicURL + "/mcp",
		HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: tok.Token, Base: toNginx}}}, nil)
	if err != nil {
		t.Fatalf("MCP through nginx with Host %s: %v", publicHost, err)
	}
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "list_local_rooms", Arguments: map[string]any{}})
	if err != nil || res.IsError {
		t.Fatalf("list_local_rooms through nginx: %v %+v", err, res)
	}
	if b, _ := json.Marshal(res.StructuredContent); !strings.Contains(string(b), `"r1"`) {
		t.Fatalf("list_local_rooms through nginx: %s", b)
	}
	// A page under a rebound name that reaches the hub's loopback port.
	req, _ := http.NewRequest(http.MethodPost, "http://"+hubAddr+"/mcp", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Host = "rebound.example"
	req.Header.Set("Authorization", "Bearer "+tok.Token)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("a rebound Host straight to the hub's loopback port: %d, want 403", resp.StatusCode)
	}
}

// TestThroughNginxWithTLS: nginx terminates TLS (a private-CA certificate)
// in front of a plain-HTTP hub on loopback. The admin commands and enroll
// reach the hub through it with --ca-file, the agent connects over wss
// with the CA enroll recorded and stays connected past nginx's read
// timeout, a command round-trips, and the hub, trusting 127.0.0.1 as its
// proxy, keys the enrollment limit on the client address nginx forwarded.
func TestThroughNginxWithTLS(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary and runs nginx; skipped with -short")
	}
	nginx := needNginx(t)
	bin := roomrelayBin(t)

	ngxDir := t.TempDir()
	ca := testutil.NewCA(t, "roomrelay e2e CA")
	caFile, _, _ := ca.WriteFiles(ngxDir, "127.0.0.1", "localhost", publicHost)
	hubAddr, ngxAddr := freeLoopbackAddr(t), freeLoopbackAddr(t)
	// Heartbeat 1 s, nginx read timeout 3 s: an idle agent must survive it.
	startNginx(t, nginx, ngxDir, map[string]string{"hub": hubAddr, "listen": ngxAddr, "read_timeout": "3s"})
	proxied := "https://" + ngxAddr

	hubHome, devHome := t.TempDir(), t.TempDir()
	env := func(home string) []string {
		return []string{"ROOMRELAY_HOME=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
	}
	runCmd := func(home string, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		c := exec.Command(bin, args...)
		c.Env, c.Stdout, c.Stderr = env(home), &out, &out
		err := c.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return 0, out.String()
	}
	start := func(home string, args ...string) {
		t.Helper()
		c := exec.Command(bin, args...)
		var logs testutil.SyncBuffer
		c.Env, c.Stdout, c.Stderr = env(home), &logs, &logs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			c.Process.Signal(os.Interrupt)
			done := make(chan struct{})
			go func() { c.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(20 * time.Second):
				c.Process.Kill()
				<-done
			}
			if t.Failed() {
				t.Logf("%v output:\n%s", args, logs.String())
			}
		})
	}

	_, ngxPort, _ := net.SplitHostPort(ngxAddr)
	publicURL := "https://" + publicHost + ":" + ngxPort
	start(hubHome, "hub", "--listen", hubAddr, "--heartbeat", "1s", "--trusted-proxy", "127.0.0.1", "--public-url", publicURL)
	eventually(t, "hub up", func() bool {
		resp, err := http.Get("http://" + hubAddr + "/v1/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == 200
	})

	// Admin over nginx: without the CA the hint, with it a pairing code.
	code, out := runCmd(hubHome, "hub", "pair", "--project", "proj-a", "--hub", proxied, "--json")
	if code != 4 || !strings.Contains(out, "--ca-file") {
		t.Fatalf("hub pair through nginx without --ca-file: %d %s", code, out)
	}
	code, out = runCmd(hubHome, "hub", "pair", "--project", "proj-a", "--hub", proxied, "--ca-file", caFile, "--json")
	var pc struct{ Code string }
	if code != 0 || json.Unmarshal([]byte(out), &pc) != nil {
		t.Fatalf("hub pair through nginx: %d %s", code, out)
	}
	if code, out := runCmd(devHome, "enroll", "--hub", proxied, "--code", pc.Code, "--credential-store", "file", "--ca-file", caFile); code != 0 {
		t.Fatalf("enroll through nginx: %d %s", code, out)
	}
	runCmd(devHome, "rooms", "create", "--project", "proj-a", "--name", "Standup", "--id", "r1")
	runCmd(devHome, "enable", "proj-a")

	// The agent: no --ca-file, enroll recorded it.
	start(devHome, "run", "--no-sandbox")
	type status struct {
		State string
		Agent struct {
			SessionID string `json:"session_id"`
		}
	}
	statusOf := func() (int, status) {
		code, out := runCmd(devHome, "status", "--json")
		var s status
		json.Unmarshal([]byte(out), &s)
		return code, s
	}
	eventually(t, "the agent online through nginx", func() bool { c, _ := statusOf(); return c == 0 })
	_, first := statusOf()

	var cfg struct {
		DeviceID string `json:"device_id"`
	}
	b, _ := os.ReadFile(filepath.Join(devHome, "config", "config.json"))
	json.Unmarshal(b, &cfg)
	callRoom := func() {
		t.Helper()
		code, out := runCmd(hubHome, "hub", "call", cfg.DeviceID, "read_room", "--project", "proj-a",
			"--args", `{"room_id":"r1"}`, "--hub", proxied, "--ca-file", caFile)
		if code != 0 || !strings.Contains(out, `"kind": "local"`) {
			t.Fatalf("hub call through nginx: %d %s", code, out)
		}
	}
	callRoom()
	mcpThroughNginx(t, runCmd, hubHome, hubAddr, ngxAddr, publicURL, proxied, caFile, ca.PEM)

	// Past nginx's read timeout the same session still serves: the
	// heartbeat keeps the proxied socket alive.
	time.Sleep(4 * time.Second)
	if code, now := statusOf(); code != 0 || now.Agent.SessionID != first.Agent.SessionID {
		t.Fatalf("after nginx's read timeout: status %d, session %q, want the same online session %q", code, now.Agent.SessionID, first.Agent.SessionID)
	}
	callRoom()

	// The client address: wrong codes from 127.0.0.2 reach the hub from
	// nginx (127.0.0.1, trusted), which forwards 127.0.0.2; the hub blocks
	// that address, by name. Where 127.0.0.2 cannot be bound (not Linux),
	// a forwarded address the client sends stands in for it: nginx appends
	// its own peer, the hub skips that trusted hop.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	client, want := "127.0.0.2", "127.0.0.2"
	dialer := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(client)}}
	if c, err := dialer.Dial("tcp", ngxAddr); err != nil {
		dialer, want = &net.Dialer{}, "198.51.100.23"
	} else {
		c.Close()
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: dialer.DialContext, TLSClientConfig: &tls.Config{RootCAs: roots}}}
	var last string
	for i := range 11 {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodPost, proxied+"/v1/enroll",
			strings.NewReader(`{"code":"ZZZZ-ZZZZ","device_name":"guess","os":"linux"}`))
		req.Header.Set("Content-Type", "application/json")
		if want != client {
			req.Header.Set("X-Forwarded-For", want)
		}
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatalf("guess %d: %v", i, err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		last = fmt.Sprintf("%d %s", resp.StatusCode, body)
	}
	if !strings.HasPrefix(last, "429") || !strings.Contains(last, "from "+want) {
		t.Fatalf("the 11th wrong code: %s; want 429 naming %s", last, want)
	}
	// The proxy's own address was not blocked with it.
	code, out = runCmd(hubHome, "hub", "pair", "--project", "proj-a", "--hub", proxied, "--ca-file", caFile, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &pc) != nil {
		t.Fatalf("hub pair: %d %s", code, out)
	}
	if code, out := runCmd(t.TempDir(), "enroll", "--hub", proxied, "--code", pc.Code, "--credential-store", "file", "--ca-file", caFile); code != 0 {
		t.Fatalf("enroll from 127.0.0.1 while %s is blocked: %d %s", want, code, out)
	}
}

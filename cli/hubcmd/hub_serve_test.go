package hubcmd

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// TestHubServerBoundsConnections: what `roomrelay hub` serves closes an idle
// keep-alive connection, cuts a body dribbled too slowly, and sheds
// connections past the per-address cap while still answering once one goes.
func TestHubServerBoundsConnections(t *testing.T) {
	lim := connLimits{perAddr: 3, total: 100, header: 5 * time.Second, read: 500 * time.Millisecond, write: 5 * time.Second, idleAfter: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ln, err := listenHub("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := startHubServer(ctx, hub.Config{DataDir: t.TempDir(), AdminToken: "rra_t", Logger: slog.New(slog.DiscardHandler)}, ln, "", oauthOptions{}, lim, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	addr := strings.TrimPrefix(srv.url, "http://")

	closedWithin := func(c net.Conn, d time.Duration) bool {
		_ = c.SetReadDeadline(time.Now().Add(d))
		_, err := io.ReadAll(c)
		var ne net.Error
		return !(err != nil && errors.As(err, &ne) && ne.Timeout())
	}

	// An idle keep-alive connection is closed after its request.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(c, "GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if !closedWithin(c, 10*time.Second) {
		t.Error("an idle keep-alive connection stayed open")
	}
	c.Close()

	// A body dribbled slower than the read timeout is cut.
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(c, "POST /v1/enroll HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
	if !closedWithin(c, 10*time.Second) {
		t.Error("a dribbled body kept its connection open")
	}
	c.Close()

	// Three silent connections fill the per-address cap; a fourth is shed.
	var held []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	for deadline := time.Now().Add(10 * time.Second); ; {
		if open, _ := srv.conns.Stats(); open == 3 {
			break // the server counted them (the earlier ones are gone)
		}
		if time.Now().After(deadline) {
			open, _ := srv.conns.Stats()
			t.Fatalf("%d connections counted, want the 3 held", open)
		}
		time.Sleep(5 * time.Millisecond)
	}
	c, err = net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.WriteString(c, "GET /v1/healthz HTTP/1.1\r\nHost: x\r\n\r\n")
	if b, _ := io.ReadAll(c); strings.Contains(string(b), "200 OK") {
		t.Error("a connection past the per-address cap was served")
	}
	c.Close()
	if _, shed := srv.conns.Stats(); shed == 0 {
		t.Error("nothing was shed")
	}
	for _, c := range held {
		c.Close()
	}
	// The held ones are closed: the hub answers again.
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get(srv.url + "/v1/healthz")
		if err == nil && resp.StatusCode == 200 {
			resp.Body.Close()
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the hub did not answer after the held connections closed: %v", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

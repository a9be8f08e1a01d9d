package hub

import (
	"io"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestConnLimiterSparesAgents: connections past the per-address cap are
// shed at accept, but an agent whose websocket was upgraded no longer
// counts and keeps being served.
func TestConnLimiterSparesAgents(t *testing.T) {
	th := startHub(t, Config{})
	dev, tok := th.enroll("p1")
	lim := NewConnLimiter(2, 0)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: th.Handler(), ConnState: lim.ConnState, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	defer srv.Close()

	a := dialAgent(t, "ws://"+ln.Addr().String()+relay.ConnectPath, tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	waitFor(t, "the upgraded agent uncounted", func() bool { open, _ := lim.Stats(); return open == 0 })

	var held []net.Conn
	for range 2 {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		held = append(held, c)
	}
	waitFor(t, "two counted", func() bool { open, _ := lim.Stats(); return open == 2 })
	c, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _ := io.Copy(io.Discard, c); n != 0 {
		t.Errorf("a shed connection got %d bytes", n)
	}
	c.Close()
	if _, shed := lim.Stats(); shed != 1 {
		t.Errorf("shed %d, want 1", shed)
	}
	th.roundTrip(dev) // the agent on the capped server still answers
	for _, c := range held {
		c.Close()
	}
	waitFor(t, "closed ones uncounted", func() bool { open, _ := lim.Stats(); return open == 0 })
}

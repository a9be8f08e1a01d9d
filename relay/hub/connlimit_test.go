package hub

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"syscall"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestConnLimiterSparesAgents: connections past the per-address cap are
// shed at accept, but an agent whose websocket was upgraded no longer
// counts and keeps being served.
func TestConnLimiterSparesAgents(t *testing.T) {
	t.Parallel()
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

// TestConnCapsSpareOtherClients: four addresses each hold their cap of
// slow connections (a request line, then nothing), which fills the total;
// requests from a fifth address are still answered, each taking the place
// of the oldest slow connection of the heaviest address.
func TestConnCapsSpareOtherClients(t *testing.T) {
	th := startHub(t, Config{})
	const perAddr, hogs = 8, 4
	lim := NewConnLimiter(perAddr, perAddr*hogs)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: th.Handler(), ConnState: lim.ConnState, ReadHeaderTimeout: time.Minute}
	go srv.Serve(ln)
	defer srv.Close()
	from := func(ip string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	}
	// The probe is a whole request, so it was accepted (and counted) before
	// the wait for it to be uncounted: a bare dial closed at once could be
	// accepted after that wait and take one of 127.0.0.2's places while the
	// hogs dial.
	probe := &http.Client{Transport: &http.Transport{DialContext: from("127.0.0.2").DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := probe.Get("http://" + ln.Addr().String() + "/v1/healthz")
	if errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Skipf("cannot bind 127.0.0.2 (not Linux?): %v", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	waitFor(t, "the probe uncounted", func() bool { open, _ := lim.Stats(); return open == 0 })
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for h := range hogs {
		for range perAddr + 2 { // two over the cap: shed at accept
			c, err := from(fmt.Sprintf("127.0.0.%d", 2+h)).Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			io.WriteString(c, "GET /v1/healthz HTTP/1.1\r\n") // and nothing more
		}
	}
	waitFor(t, "the hogs hold every place", func() bool { open, _ := lim.Stats(); return open == perAddr*hogs })
	hc := &http.Client{Transport: &http.Transport{DialContext: from("127.0.0.9").DialContext, DisableKeepAlives: true}, Timeout: 10 * time.Second}
	answered := 0
	for range 10 {
		resp, err := hc.Get("http://" + ln.Addr().String() + "/v1/healthz")
		if err == nil {
			if resp.StatusCode == http.StatusOK {
				answered++
			}
			resp.Body.Close()
		}
	}
	if answered != 10 {
		t.Fatalf("%d of 10 requests from another address answered while %d addresses hold their cap", answered, hogs)
	}
}

// pinned is a connection that says it comes from addr.
type pinned struct {
	net.Conn
	addr net.Addr
}

func (p pinned) RemoteAddr() net.Addr { return p.addr }

// TestConnCapsByIPv6Prefix: addresses of one /64 share one cap; another
// /64 has its own.
func TestConnCapsByIPv6Prefix(t *testing.T) {
	t.Parallel()
	lim := NewConnLimiter(2, 0)
	conn := func(ip string) net.Conn {
		a, b := net.Pipe()
		t.Cleanup(func() { a.Close(); b.Close() })
		return pinned{a, &net.TCPAddr{IP: net.ParseIP(ip), Port: 4711}}
	}
	for _, ip := range []string{"2001:db8::1", "2001:db8::ffff:2", "2001:db8::3", "2001:db8:0:1::1"} {
		lim.ConnState(conn(ip), http.StateNew)
	}
	if open, shed := lim.Stats(); open != 3 || shed != 1 {
		t.Fatalf("open %d shed %d; want the third address of 2001:db8::/64 shed, the other /64 counted", open, shed)
	}
}

// TestEvictionSparesRequestsInFlight: one address has requests being
// served (long polls, as wait_for_review's), more than any other address
// holds; then other addresses fill the total cap with slow connections
// (request headers never finished) and keep coming. Every request in
// flight is answered: the newcomers take the slow ones' places, never a
// connection whose handler runs (#29.7: 4 of 20 in-flight wait_for_review
// calls were cut, because the busy address was the heaviest prefix).
func TestEvictionSparesRequestsInFlight(t *testing.T) {
	const perAddr, total, inFlight, hogs, perHog = 24, 40, 20, 6, 16 // bounded in count
	lim := NewConnLimiter(perAddr, total)
	release := make(chan struct{})
	started := make(chan struct{}, inFlight)
	mux := http.NewServeMux()
	mux.HandleFunc("/poll", func(w http.ResponseWriter, r *http.Request) {
		started <- struct{}{}
		select {
		case <-release:
		case <-time.After(30 * time.Second): // bounded in time
		}
		io.WriteString(w, "decided")
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: time.Minute}
	lim.Install(srv)
	go srv.Serve(ln)
	defer srv.Close()
	from := func(ip string) *net.Dialer {
		return &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	}
	if c, err := from("127.0.0.2").Dial("tcp", ln.Addr().String()); errors.Is(err, syscall.EADDRNOTAVAIL) {
		t.Skipf("cannot bind 127.0.0.2 (not Linux?): %v", err)
	} else if err == nil {
		c.Close()
	}
	waitFor(t, "the check dial uncounted", func() bool { open, _ := lim.Stats(); return open == 0 })

	busy := &http.Client{Transport: &http.Transport{DialContext: from("127.0.0.2").DialContext, DisableKeepAlives: true}, Timeout: time.Minute}
	results := make(chan error, inFlight)
	for range inFlight {
		go func() {
			resp, err := busy.Get("http://" + ln.Addr().String() + "/poll")
			if err == nil {
				b, _ := io.ReadAll(resp.Body)
				resp.Body.Close()
				if string(b) != "decided" {
					err = fmt.Errorf("answer %q", b)
				}
			}
			results <- err
		}()
	}
	for range inFlight {
		<-started
	}
	var held []net.Conn
	defer func() {
		for _, c := range held {
			c.Close()
		}
	}()
	for h := range hogs {
		for range perHog {
			c, err := from(fmt.Sprintf("127.0.0.%d", 3+h)).Dial("tcp", ln.Addr().String())
			if err != nil {
				t.Fatal(err)
			}
			held = append(held, c)
			io.WriteString(c, "GET /poll HTTP/1.1\r\n") // and nothing more
		}
	}
	// The hogs' connections are accepted (counted, or shed) in turn.
	waitFor(t, "every hog connection handled", func() bool {
		open, shed := lim.Stats()
		return open == total && int(shed) >= hogs*perHog-(total-inFlight)
	})
	close(release)
	cut := 0
	for range inFlight {
		if err := <-results; err != nil {
			cut++
			if cut <= 3 {
				t.Logf("a request in flight: %v", err)
			}
		}
	}
	_, shed := lim.Stats()
	t.Logf("%d requests in flight from one address, %d slow connections from %d others at a total cap of %d: %d cut, %d connections shed or evicted",
		inFlight, hogs*perHog, hogs, total, cut, shed)
	if cut > 0 {
		t.Fatalf("%d of %d requests in flight were cut", cut, inFlight)
	}
}

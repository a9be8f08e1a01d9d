package hub

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// TestClientAddr: X-Forwarded-For counts only from a trusted peer, is read
// from the right past trusted hops, and a malformed entry falls back to the
// peer.
func TestClientAddr(t *testing.T) {
	t.Parallel()
	h, err := New(Config{DataDir: t.TempDir(), AdminToken: testAdmin, TrustedProxies: []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8:1::/48")}})
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name, peer string
		xff        []string
		want       string
	}{
		{"untrusted peer, XFF ignored", "192.0.2.9:5000", []string{"198.51.100.1"}, "192.0.2.9"},
		{"trusted peer, no XFF", "10.1.2.3:5000", nil, "10.1.2.3"},
		{"trusted peer", "10.1.2.3:5000", []string{"198.51.100.1"}, "198.51.100.1"},
		{"client-sent prefix is not believed", "10.1.2.3:5000", []string{"203.0.113.66, 198.51.100.1"}, "198.51.100.1"},
		{"trusted hops skipped", "10.1.2.3:5000", []string{"203.0.113.66, 198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"several header lines", "10.1.2.3:5000", []string{"203.0.113.66", "198.51.100.1, 10.9.9.9"}, "198.51.100.1"},
		{"entry with a port", "10.1.2.3:5000", []string{"198.51.100.1:4711"}, "198.51.100.1"},
		{"malformed entry: the peer", "10.1.2.3:5000", []string{"198.51.100.1, bogus"}, "10.1.2.3"},
		{"malformed beyond a trusted hop: the peer", "10.1.2.3:5000", []string{"bogus, 10.9.9.9"}, "10.1.2.3"},
		{"all hops trusted: the leftmost", "10.1.2.3:5000", []string{"10.7.7.7, 10.9.9.9"}, "10.7.7.7"},
		{"IPv6 trusted peer", "[2001:db8:1::5]:443", []string{"2001:db8:2::7"}, "2001:db8:2::7"},
		{"IPv6 untrusted peer", "[2001:db8:9::5]:443", []string{"198.51.100.1"}, "2001:db8:9::5"},
		{"IPv4-mapped trusted peer", "[::ffff:10.1.2.3]:5000", []string{"198.51.100.1"}, "198.51.100.1"},
	} {
		r := httptest.NewRequest(http.MethodGet, "/", nil)
		r.RemoteAddr = tc.peer
		for _, v := range tc.xff {
			r.Header.Add("X-Forwarded-For", v)
		}
		if got := h.ClientAddr(r); got != tc.want {
			t.Errorf("%s: ClientAddr = %q, want %q", tc.name, got, tc.want)
		}
	}
}

// xff is a hubclient transport that sends every request as if a proxy had
// forwarded it for addr.
type xff string

func (a xff) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-For", string(a))
	return http.DefaultTransport.RoundTrip(r)
}

func clientVia(th *testHub, addr string) *hubclient.Client {
	c := hubclient.New(th.URL(), testAdmin)
	c.HTTP = &http.Client{Transport: xff(addr)}
	return c
}

// TestEnrollLimitBehindTrustedProxy: through a trusted proxy, concurrent
// wrong codes forwarded for A block A after EnrollFailures evaluated (and
// the count is in KV under A), a valid code forwarded for A is refused
// while one forwarded for B enrolls.
func TestEnrollLimitBehindTrustedProxy(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}})
	ctx := context.Background()
	const a, b = "198.51.100.1", "198.51.100.2"
	viaA, viaB := clientVia(th, a), clientVia(th, b)

	var mu sync.Mutex
	evaluated, limited := 0, 0
	var wg sync.WaitGroup
	for range 25 {
		wg.Go(func() {
			_, err := viaA.Enroll(ctx, "ZZZZ-ZZZZ", "x", "linux", "")
			mu.Lock()
			defer mu.Unlock()
			switch {
			case hubclient.IsCode(err, "pairing_code_unknown"):
				evaluated++
			case hubclient.IsCode(err, "rate_limited"):
				limited++
				if !strings.Contains(err.Error(), a) {
					t.Errorf("the refusal does not name the forwarded client %s: %v", a, err)
				}
			default:
				t.Errorf("wrong code: %v", err)
			}
		})
	}
	wg.Wait()
	if evaluated != 10 || limited != 15 {
		t.Fatalf("%d wrong codes evaluated and %d refused, want 10 and 15", evaluated, limited)
	}
	if rec, _, err := getJSON[enrollFailRec](ctx, th.st.enroll, enrollKey(a)); err != nil || rec.N < 10 {
		t.Fatalf("the shared count for %s: %+v, %v", a, rec, err)
	}
	if _, _, err := getJSON[enrollFailRec](ctx, th.st.enroll, enrollKey("127.0.0.1")); err == nil {
		t.Error("failures were counted against the proxy's own address")
	}

	pc, err := th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := viaA.Enroll(ctx, pc.Code, "x", "linux", ""); !hubclient.IsCode(err, "rate_limited") {
		t.Fatalf("a valid code from the blocked client: %v, want rate_limited", err)
	}
	if _, err := viaB.Enroll(ctx, pc.Code, "x", "linux", ""); err != nil {
		t.Fatalf("a valid code from another client behind the same proxy: %v", err)
	}
}

// TestEnrollLimitIgnoresUntrustedXFF: from a peer that is not a trusted
// proxy, X-Forwarded-For is ignored: varying it does not escape the limit,
// which keys on the peer.
func TestEnrollLimitIgnoresUntrustedXFF(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{TrustedProxies: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")}})
	ctx := context.Background()
	for i := range 10 {
		c := clientVia(th, fmt.Sprint("198.51.100.", i+1))
		if _, err := c.Enroll(ctx, "ZZZZ-ZZZZ", "x", "linux", ""); !hubclient.IsCode(err, "pairing_code_unknown") {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	pc, err := th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = clientVia(th, "203.0.113.5").Enroll(ctx, pc.Code, "x", "linux", "")
	if !hubclient.IsCode(err, "rate_limited") || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("a spoofed X-Forwarded-For from an untrusted peer: %v, want rate_limited for 127.0.0.1", err)
	}
}

// TestConnLimiterExemptsTrustedProxies: a trusted proxy's connections are
// not capped per address (every client behind it shares its address), but
// the total cap still holds.
func TestConnLimiterExemptsTrustedProxies(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		exempt    []netip.Prefix
		total     int
		wantKept  int
		wantShed  uint64
		heldConns int
	}{
		{"untrusted: per-address cap", nil, 0, 2, 2, 4},
		{"trusted: no per-address cap", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 0, 4, 0, 4},
		{"trusted: the total cap holds", []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, 3, 3, 1, 4},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lim := NewConnLimiter(2, tc.total)
			lim.ExemptFromPerAddr(tc.exempt)
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := &http.Server{Handler: http.NotFoundHandler(), ConnState: lim.ConnState, ReadHeaderTimeout: 10 * time.Second}
			go srv.Serve(ln)
			defer srv.Close()
			for range tc.heldConns {
				c, err := net.Dial("tcp", ln.Addr().String())
				if err != nil {
					t.Fatal(err)
				}
				defer c.Close()
			}
			waitFor(t, "every connection accepted", func() bool {
				open, shed := lim.Stats()
				return open+int(shed) == tc.heldConns
			})
			if open, shed := lim.Stats(); open != tc.wantKept || shed != tc.wantShed {
				t.Errorf("%d kept and %d shed, want %d and %d", open, shed, tc.wantKept, tc.wantShed)
			}
		})
	}
}

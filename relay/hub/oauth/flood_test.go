package oauth

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// Flood tests (#29): a stranger, without signing in, sends as many
// requests as the test's budget allows (a count and seconds, loopback
// only), from its own loopback address; the test logs the figure and
// checks what the flood left in the store and that a known user, from
// another address, is unaffected.

// fromAddr is an HTTP client whose connections leave from a loopback
// source address (127.0.0.2: another client prefix than the test's own).
func fromAddr(t *testing.T, ip string) *http.Client {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}, Timeout: 5 * time.Second}
	return &http.Client{Transport: &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 16},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

type floodResult struct {
	sent     int
	byStatus map[int]int
	took     time.Duration
}

// flood sends up to n requests made by mk (8 at a time) for at most d.
func flood(t *testing.T, c *http.Client, n int, d time.Duration, mk func(i int) *http.Request) floodResult {
	t.Helper()
	var next atomic.Int64
	var mu sync.Mutex
	res := floodResult{byStatus: map[int]int{}}
	start := time.Now()
	deadline := start.Add(d)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for time.Now().Before(deadline) {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				r, err := c.Do(mk(i))
				status := -1
				if err == nil {
					status = r.StatusCode
					r.Body.Close()
				}
				mu.Lock()
				res.sent++
				res.byStatus[status]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	res.took = time.Since(start)
	return res
}

// atMost is what a bucket of n a minute (burst n) lets through in d.
func atMost(n int, d time.Duration) int { return n + int(float64(n)*d.Minutes()) + 1 }

func formPost(u string, v url.Values) *http.Request {
	r, _ := http.NewRequest(http.MethodPost, u, strings.NewReader(v.Encode()))
	r.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	return r
}

// bucketBytes is what one of the OAuth buckets holds now.
func (ta *testAS) bucketBytes(pick func(hub.OAuthBuckets) jetstream.KeyValue) uint64 {
	ta.t.Helper()
	b, err := ta.h.OAuthBuckets()
	if err != nil {
		ta.t.Fatal(err)
	}
	st, err := pick(b).Status(context.Background())
	if err != nil {
		ta.t.Fatal(err)
	}
	return st.Bytes()
}

func tokensBucket(b hub.OAuthBuckets) jetstream.KeyValue  { return b.Tokens }
func clientsBucket(b hub.OAuthBuckets) jetstream.KeyValue { return b.Clients }
func flowBucket(b hub.OAuthBuckets) jetstream.KeyValue    { return b.Flow }

// TestRevokeFloodWritesNothing (#29.1): revocations of tokens that do
// not exist write nothing (RFC 7009 §2.2: 200 and do nothing), the
// endpoint is rate-limited per client prefix, and a known user's sign-in
// and revocation from another address still work.
func TestRevokeFloodWritesNothing(t *testing.T) {
	ta := startAS(t, nil)
	_, tok := ta.fullFlow("read")
	before := ta.bucketBytes(tokensBucket)
	stranger := fromAddr(t, "127.0.0.2")
	res := flood(t, stranger, 3000, 15*time.Second, func(i int) *http.Request {
		return formPost(ta.url+PathRevoke, url.Values{"token": {newSecret(PrefixAccess)}})
	})
	after := ta.bucketBytes(tokensBucket)
	t.Logf("revoke flood: %d requests in %v (%v), the tokens bucket %d -> %d bytes (+%d)",
		res.sent, res.took.Round(time.Millisecond), res.byStatus, before, after, int64(after)-int64(before))
	if after != before {
		t.Errorf("revocations of unknown tokens wrote %d bytes", int64(after)-int64(before))
	}
	if res.byStatus[http.StatusTooManyRequests] == 0 {
		t.Errorf("no revocation was rate-limited: %v", res.byStatus)
	}
	// The known user, from its own address: its token works, and its own
	// revocation does.
	if s := ta.mcpStatus(tok["access_token"].(string)); s == 401 {
		t.Fatal("the known user's token was refused after the flood")
	}
	if r := do(t, http.DefaultClient, http.MethodPost, ta.url+PathRevoke, url.Values{"token": {tok["refresh_token"].(string)}}); r.status != 200 {
		t.Fatalf("the known user's revocation: %d %s", r.status, r.body)
	}
	if s := ta.mcpStatus(tok["access_token"].(string)); s != 401 {
		t.Errorf("after the known user's revocation: %d", s)
	}
}

// TestRefreshFloodBounded (#29.4): one signed-in client refreshing in a
// loop (each time with its newest token) is held to its grant's rate;
// strangers' token requests are held per client prefix; what the store
// keeps stays bounded and another client still signs in.
func TestRefreshFloodBounded(t *testing.T) {
	ta := startAS(t, nil)
	client, tok := ta.fullFlow("read")
	before := ta.bucketBytes(tokensBucket)
	c := fromAddr(t, "127.0.0.3")
	rt := tok["refresh_token"].(string)
	byStatus := map[int]int{}
	start := time.Now()
	n := 0
	for ; n < 3000 && time.Since(start) < 15*time.Second; n++ {
		r, err := c.Do(formPost(ta.url+PathToken, url.Values{"grant_type": {"refresh_token"}, "client_id": {client}, "refresh_token": {rt}}))
		if err != nil {
			t.Fatal(err)
		}
		var out map[string]any
		_ = json.NewDecoder(r.Body).Decode(&out)
		r.Body.Close()
		byStatus[r.StatusCode]++
		if r.StatusCode == 200 {
			rt = out["refresh_token"].(string)
		}
	}
	took := time.Since(start)
	after := ta.bucketBytes(tokensBucket)
	t.Logf("refresh flood: %d refreshes in %v (%v), the tokens bucket %d -> %d bytes (+%d)",
		n, took.Round(time.Millisecond), byStatus, before, after, int64(after)-int64(before))
	if byStatus[200] > atMost(tokenPerGrant, took) {
		t.Errorf("%d refreshes of one grant succeeded in %v, want at most %d a minute", byStatus[200], took, tokenPerGrant)
	}
	// Strangers' token requests, from yet another address: held per prefix.
	res := flood(t, fromAddr(t, "127.0.0.2"), 3000, 15*time.Second, func(int) *http.Request {
		return formPost(ta.url+PathToken, url.Values{"grant_type": {"refresh_token"}, "client_id": {"rrcl-x"}, "refresh_token": {newSecret(PrefixRefresh)}})
	})
	t.Logf("token flood (strangers): %d requests in %v (%v)", res.sent, res.took.Round(time.Millisecond), res.byStatus)
	if res.byStatus[http.StatusTooManyRequests] == 0 || res.byStatus[http.StatusBadRequest] > atMost(tokenPerPrefix, res.took) {
		t.Errorf("the token endpoint was not limited per client prefix: %v", res.byStatus)
	}
	// Another client signs in, from the test's own address.
	if _, tok2 := ta.fullFlow("read"); ta.mcpStatus(tok2["access_token"].(string)) == 401 {
		t.Fatal("another client's sign-in after the floods")
	}
}

// TestRegistrationFloodFullBucket (#29.3, real NATS): registrations from
// many networks fill the clients bucket (2 MiB under the smallest storage
// budget); the full bucket evicts never-used registrations, so new ones
// keep being accepted and the client that signed in keeps working.
func TestRegistrationFloodFullBucket(t *testing.T) {
	ta := startASHub(t, hub.Config{StorageBudget: hub.MinStorageBudget}, nil)
	_, tok := ta.fullFlow("read")
	var uris []string
	for i := range 8 {
		uris = append(uris, fmt.Sprintf("http://127.0.0.1/callback/%d/%s", i, strings.Repeat("p", 440)))
	}
	body, _ := json.Marshal(map[string]any{"redirect_uris": uris, "client_name": "flood"})
	byStatus := map[int]int{}
	start := time.Now()
	n := 0
	for ; n < 1500 && time.Since(start) < 30*time.Second; n++ {
		c := fromAddr(t, fmt.Sprintf("127.%d.%d.1", 1+n/250, n%250)) // a /24 each
		r, err := c.Post(ta.url+PathRegister, "application/json", strings.NewReader(string(body)))
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		c.CloseIdleConnections()
		byStatus[r.StatusCode]++
	}
	t.Logf("registration flood: %d from %d /24s in %v: %v, the clients bucket holds %d bytes",
		n, n, time.Since(start).Round(time.Millisecond), byStatus, ta.bucketBytes(clientsBucket))
	if byStatus[http.StatusServiceUnavailable] > 0 {
		t.Errorf("the full bucket refused registrations: %v", byStatus)
	}
	if ta.mcpStatus(tok["access_token"].(string)) == 401 {
		t.Fatal("the signed-in client's token was refused after the flood")
	}
	_, tok2 := ta.fullFlow("read") // registers, signs in and exchanges after the flood
	if ta.mcpStatus(tok2["access_token"].(string)) == 401 {
		t.Fatal("a sign-in after the flood")
	}
}

// TestAuthorizeFloodBounded (#29.2, real NATS): a stranger opening
// consent pages in a loop stores at most a prefix's few unacted requests;
// the known user then signs in.
func TestAuthorizeFloodBounded(t *testing.T) {
	ta := startAS(t, nil)
	client := ta.register("http://127.0.0.1/callback")
	before := ta.bucketBytes(flowBucket)
	u := ta.authorizeURL(authReq{client: client, redirect: "http://127.0.0.1:5000/callback"})
	res := flood(t, fromAddr(t, "127.0.0.2"), 3000, 15*time.Second, func(int) *http.Request {
		r, _ := http.NewRequest(http.MethodGet, u, nil)
		return r
	})
	after := ta.bucketBytes(flowBucket)
	t.Logf("consent flood: %d pages in %v (%v), the flow bucket %d -> %d bytes (+%d)",
		res.sent, res.took.Round(time.Millisecond), res.byStatus, before, after, int64(after)-int64(before))
	if res.byStatus[http.StatusTooManyRequests] == 0 {
		t.Errorf("the consent pages were not rate-limited: %v", res.byStatus)
	}
	if grown := int64(after) - int64(before); grown > 64<<10 {
		t.Errorf("a stranger's consent pages left %d bytes in the flow bucket", grown)
	}
	if _, tok := ta.fullFlow("read"); ta.mcpStatus(tok["access_token"].(string)) == 401 {
		t.Fatal("the known user's sign-in after the flood")
	}
}

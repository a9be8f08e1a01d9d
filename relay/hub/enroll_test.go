package hub

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

func TestPairingCodes(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	// Many failures from one address on purpose: the limit is not what this
	// test is about (TestEnrollGuessingIsLimited is).
	th := startHub(t, Config{Now: clock, PairingTTL: 10 * time.Minute, EnrollFailures: 1000})
	good, gtok := th.enroll("p1")
	ga := dialAgent(t, th.wsURL(), gtok, good)
	ga.serve(echoHandler)
	ctx := context.Background()

	wantErr := func(err error, status int, code string) {
		t.Helper()
		ae, ok := err.(*hubclient.APIError)
		if !ok || ae.Status != status || ae.Code != code {
			t.Fatalf("got %v, want %d %s", err, status, code)
		}
	}

	// Reused code.
	pc, err := th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(pc.Code) != 9 || pc.Code[4] != '-' || !pc.ExpiresAt.Equal(clock().Add(10*time.Minute)) {
		t.Errorf("pairing code %+v", pc)
	}
	en, err := th.cl.Enroll(ctx, strings.ToLower(strings.ReplaceAll(pc.Code, "-", "")), "laptop", "darwin", "")
	if err != nil {
		t.Fatalf("enroll with a lower-case code without dash: %v", err)
	}
	if !strings.HasPrefix(en.Token, "rrd_") || en.Project != "p1" || len(en.Projects) != 1 {
		t.Errorf("enrollment %+v", en)
	}
	_, err = th.cl.Enroll(ctx, pc.Code, "laptop2", "linux", "")
	wantErr(err, http.StatusConflict, "pairing_code_used")

	// Expired code.
	pc, err = th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	now.Add(int64(10*time.Minute + time.Second))
	_, err = th.cl.Enroll(ctx, pc.Code, "late", "linux", "")
	wantErr(err, http.StatusGone, "pairing_code_expired")

	// Unknown and malformed codes.
	_, err = th.cl.Enroll(ctx, "ZZZZ-ZZZZ", "x", "linux", "")
	wantErr(err, http.StatusNotFound, "pairing_code_unknown")
	_, err = th.cl.Enroll(ctx, "nope", "x", "linux", "")
	wantErr(err, http.StatusBadRequest, "invalid_request")

	// A second project for an existing device, with its token.
	pc, err = th.cl.Pair(ctx, "p2", 0)
	if err != nil {
		t.Fatal(err)
	}
	en2, err := th.cl.Enroll(ctx, pc.Code, "", "", en.Token)
	if err != nil {
		t.Fatal(err)
	}
	if en2.DeviceID != en.DeviceID || len(en2.Projects) != 2 {
		t.Errorf("adding a project made %+v, want device %s with 2 projects", en2, en.DeviceID)
	}
	// With a wrong device token the code is not spent.
	pc, err = th.cl.Pair(ctx, "p3", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = th.cl.Enroll(ctx, pc.Code, "", "", "rrd_wrong")
	wantErr(err, http.StatusUnauthorized, "invalid_token")
	if _, err := th.cl.Enroll(ctx, pc.Code, "fresh", "linux", ""); err != nil {
		t.Errorf("code spent by a failed token check: %v", err)
	}

	// Concurrent double use: exactly one wins.
	pc, err = th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	var wins, conflicts atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		wg.Go(func() {
			<-start
			_, err := th.cl.Enroll(ctx, pc.Code, "racer", "linux", "")
			if err == nil {
				wins.Add(1)
			} else if hubclient.IsCode(err, "pairing_code_used") {
				conflicts.Add(1)
			} else {
				t.Errorf("racer: %v", err)
			}
		})
	}
	close(start)
	wg.Wait()
	if wins.Load() != 1 || conflicts.Load() != 7 {
		t.Fatalf("concurrent use: %d wins, %d conflicts; want 1 and 7", wins.Load(), conflicts.Load())
	}

	// Bad pairing requests.
	_, err = th.cl.Pair(ctx, "", 0)
	wantErr(err, http.StatusBadRequest, "invalid_request")
	_, err = th.cl.Pair(ctx, "p1", 2*time.Hour)
	wantErr(err, http.StatusBadRequest, "invalid_request")
	th.roundTrip(good)
}

func TestAdminAuth(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	if devs, err := th.cl.Devices(context.Background()); err != nil || len(devs) != 0 {
		t.Fatalf("empty hub lists %v %v", devs, err)
	}
	for _, tok := range []string{"", "wrong", testAdmin + "x"} {
		cl := hubclient.New(th.URL(), tok)
		_, err := cl.Devices(context.Background())
		ae, ok := err.(*hubclient.APIError)
		if !ok || ae.Status != http.StatusUnauthorized {
			t.Errorf("token %q: %v, want 401", tok, err)
		}
		if _, err := cl.Pair(context.Background(), "p1", 0); !hubclient.IsCode(err, "unauthorized") {
			t.Errorf("pair with token %q: %v", tok, err)
		}
	}
	// A device token is not an admin token.
	_, dtok := th.enroll("p1")
	if _, err := hubclient.New(th.URL(), dtok).Devices(context.Background()); !hubclient.IsCode(err, "unauthorized") {
		t.Errorf("device token on admin endpoint: %v", err)
	}
}

func TestAdminTokenFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir() + "/data"
	tok, err := LoadOrCreateAdminToken(dir)
	if err != nil || !strings.HasPrefix(tok, "rra_") {
		t.Fatalf("create: %q %v", tok, err)
	}
	again, err := LoadOrCreateAdminToken(dir)
	if err != nil || again != tok {
		t.Fatalf("load: %q %v", again, err)
	}
	fi, err := os.Stat(dir + "/" + adminTokenFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("mode %v %v", fi, err)
	}
}

// TestEnrollGuessingIsLimited: failed enrollments from one address are
// limited; a valid code is refused too while the address is blocked (a
// guesser must not learn which guess was right), and the window ending
// lets the address in again.
func TestEnrollGuessingIsLimited(t *testing.T) {
	t.Parallel()
	var now atomic.Int64
	now.Store(time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixNano())
	clock := func() time.Time { return time.Unix(0, now.Load()) }
	th := startHub(t, Config{Now: clock, EnrollFailures: 3, EnrollWindow: time.Minute})
	ctx := context.Background()
	for i := range 3 {
		if _, err := th.cl.Enroll(ctx, "ZZZZ-ZZZZ", "x", "linux", ""); !hubclient.IsCode(err, "pairing_code_unknown") {
			t.Fatalf("guess %d: %v", i, err)
		}
	}
	pc, err := th.cl.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = th.cl.Enroll(ctx, pc.Code, "x", "linux", "")
	ae, ok := err.(*hubclient.APIError)
	if !ok || ae.Status != http.StatusTooManyRequests || ae.Code != "rate_limited" || !strings.Contains(ae.Message, "retry in") {
		t.Fatalf("4th attempt: %v; want 429 rate_limited", err)
	}
	now.Add(int64(time.Minute + time.Second))
	if _, err := th.cl.Enroll(ctx, pc.Code, "x", "linux", ""); err != nil {
		t.Fatalf("after the window, the valid code (not spent while blocked): %v", err)
	}
}

func TestFailLimiterBoundsMemory(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(0, 0)
	now := t0
	l := newFailLimiter(2, time.Minute, func() time.Time { return now })
	for i := range maxTracked + 5 {
		l.fail(fmt.Sprint("10.0.", i/256, ".", i%256))
	}
	if n := len(l.hits); n > maxTracked {
		t.Fatalf("%d addresses tracked, want at most %d", n, maxTracked)
	}
	l.fail("a")
	l.fail("a")
	if b, _ := l.blocked("a"); !b {
		t.Fatal("a not blocked after 2 failures")
	}
	now = now.Add(2 * time.Minute)
	if b, _ := l.blocked("a"); b {
		t.Fatal("a still blocked after the window")
	}
}

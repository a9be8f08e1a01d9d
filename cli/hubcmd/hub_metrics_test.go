package hubcmd

import (
	"context"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/internal/testutil"
)

// TestHubMetricsListen: `roomrelay hub --metrics-listen ADDR` names the
// address in its banner and serves /metrics there without a token, while
// the main listener's /metrics wants the admin token; the metrics listener
// stops with the hub.
func TestHubMetricsListen(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stderr := &testutil.SyncBuffer{}
	e := &cli.Env{Stdout: io.Discard, Stderr: stderr, Getenv: func(string) string { return "" }}
	done := make(chan int, 1)
	go func() {
		done <- cli.Main(ctx, []string{"hub", "--listen", "127.0.0.1:0", "--metrics-listen", "127.0.0.1:0",
			"--data-dir", t.TempDir(), "--admin-token", "rra_metrics-test"}, e)
	}()

	// Log lines go to stderr too: match the two banner lines separately.
	hubLine := regexp.MustCompile(`hub listening on (http://\S+) `)
	metricsLine := regexp.MustCompile(`hub metrics on (http://\S+)/metrics`)
	var hubURL, metricsURL string
	for deadline := time.Now().Add(30 * time.Second); hubURL == "" || metricsURL == ""; {
		select {
		case code := <-done:
			t.Fatalf("hub exited %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no banner naming the metrics address: %q", stderr.String())
		}
		out := stderr.String()
		if m := hubLine.FindStringSubmatch(out); m != nil {
			hubURL = m[1]
		}
		if m := metricsLine.FindStringSubmatch(out); m != nil {
			metricsURL = m[1]
		}
		time.Sleep(20 * time.Millisecond)
	}

	get := func(url string) (int, string) {
		t.Helper()
		resp, err := http.Get(url)
		if err != nil {
			t.Fatalf("GET %s: %v", url, err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get(metricsURL + "/metrics"); code != http.StatusOK || !strings.Contains(body, "\nroomrelay_hub_nats_connected 1\n") {
		t.Errorf("metrics listener without a token: %d %.300q", code, body)
	}
	if code, _ := get(hubURL + "/metrics"); code != http.StatusUnauthorized {
		t.Errorf("the hub's own /metrics without a token: %d, want 401", code)
	}

	cancel()
	select {
	case code := <-done:
		if code != cli.ExitOK {
			t.Errorf("hub exited %d: %s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("hub still running 30s after cancel")
	}
	if resp, err := http.Get(metricsURL + "/metrics"); err == nil {
		resp.Body.Close()
		t.Error("the metrics listener still answers after the hub stopped")
	}
}

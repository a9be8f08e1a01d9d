package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// testHub is a real hub (embedded NATS) served on loopback for the CLI
// tests, with the admin token "rra_t"; stopped at the end of the test.
// It is the hub library mounted on a listener, not the `roomrelay hub`
// command (cli/hubcmd, which package cli cannot import): the tests here
// are about the device's and the admin's commands.
type testHub struct {
	hub *hub.Hub
	url string
	ctx context.Context

	stop      context.CancelFunc
	srv       *http.Server
	runEnded  chan struct{}
	closeOnce sync.Once
}

func startTestHub(t *testing.T) *testHub { return startTestHubWith(t, nil, nil) }

// startTestHubWith serves the hub over TLS when tlsCfg is set, logging to
// log when it is set.
func startTestHubWith(t *testing.T, tlsCfg *tls.Config, log *slog.Logger) *testHub {
	t.Helper()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	h, err := hub.New(hub.Config{DataDir: t.TempDir(), AdminToken: "rra_t", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	scheme := "http://"
	if tlsCfg != nil {
		ln, scheme = tls.NewListener(ln, tlsCfg), "https://"
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &testHub{hub: h, url: scheme + ln.Addr().String(), ctx: ctx, stop: cancel,
		srv: &http.Server{Handler: h.Handler(), ReadHeaderTimeout: 10 * time.Second}, runEnded: make(chan struct{})}
	var runErr error
	go func() {
		runErr = h.Run(ctx)
		close(th.runEnded)
	}()
	select {
	case <-h.Ready():
	case <-th.runEnded:
		ln.Close()
		cancel()
		t.Fatalf("hub did not start: %v", runErr)
	}
	go func() {
		if err := th.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	}()
	t.Cleanup(th.close)
	return th
}

// close stops the hub (which drains its agents), then the listener; safe
// to call more than once.
func (th *testHub) close() {
	th.closeOnce.Do(func() {
		th.stop()
		<-th.runEnded
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if th.srv.Shutdown(ctx) != nil {
			th.srv.Close()
		}
	})
}

// enroll runs `roomrelay enroll` (file credential store) for project on
// the home in env with a fresh pairing code, and returns the device config
// it wrote.
func (h *testHub) enroll(t *testing.T, env map[string]string, project string) deviceConfig {
	t.Helper()
	pc, err := h.hub.Pair(h.ctx, project, 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "enroll", "--hub", h.url, "--code", pc.Code, "--credential-store", "file"); code != ExitOK {
		t.Fatalf("enroll: %d %s", code, errs)
	}
	var dc deviceConfig
	b, err := os.ReadFile(filepath.Join(env["ROOMRELAY_HOME"], "config", deviceConfigName))
	if err != nil || json.Unmarshal(b, &dc) != nil {
		t.Fatalf("device config %s: %v", b, err)
	}
	return dc
}

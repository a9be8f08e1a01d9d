// Package testhub runs a real hub (embedded NATS unless the config names
// one) on a loopback listener, for the tests outside relay/hub: the device
// workflows, the CLI and the end-to-end tests share this one harness.
package testhub

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// AdminToken is the admin token a test hub gets unless its config sets one.
const AdminToken = "rra_test"

// Options are how the hub is served.
type Options struct {
	Addr    string                      // listen address; "" is 127.0.0.1 on any port
	TLS     *tls.Config                 // serve HTTPS with this config
	Handler func(*hub.Hub) http.Handler // what is mounted; nil is the hub's own Handler
}

// Hub is a running test hub; it stops at the end of the test.
type Hub struct {
	*hub.Hub
	url, addr string

	t      testing.TB
	cancel context.CancelFunc
	done   chan error
	srv    *http.Server
	served sync.WaitGroup
	once   sync.Once
}

// Start runs a hub with cfg (a temp data dir, AdminToken and a discarding
// logger where cfg leaves them empty) and serves it.
func Start(t testing.TB, cfg hub.Config, o Options) *Hub {
	t.Helper()
	if cfg.DataDir == "" {
		cfg.DataDir = t.TempDir()
	}
	if cfg.AdminToken == "" {
		cfg.AdminToken = AdminToken
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	h, err := hub.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	th := &Hub{Hub: h, t: t, cancel: cancel, done: make(chan error, 1)}
	go func() { th.done <- h.Run(ctx) }()
	select {
	case <-h.Ready():
	case err := <-th.done:
		cancel()
		t.Fatalf("hub did not start: %v", err)
	}
	addr := o.Addr
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		th.stopHub()
		t.Fatalf("listen %s: %v", addr, err)
	}
	scheme := "http://"
	if o.TLS != nil {
		ln, scheme = tls.NewListener(ln, o.TLS), "https://"
	}
	handler := h.Handler()
	if o.Handler != nil {
		handler = o.Handler(h)
	}
	th.addr = ln.Addr().String()
	th.url = scheme + th.addr
	th.srv = &http.Server{Handler: handler, ReadHeaderTimeout: 10 * time.Second}
	th.served.Go(func() {
		if err := th.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	t.Cleanup(th.Stop)
	return th
}

// URL is the base URL, http:// or https://.
func (th *Hub) URL() string { return th.url }

// Addr is the listener's host:port.
func (th *Hub) Addr() string { return th.addr }

// Stop stops the hub (which drains its agents), then the listener; safe to
// call more than once. A Run error other than the cancel fails the test.
func (th *Hub) Stop() {
	th.once.Do(func() {
		th.stopHub()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if th.srv.Shutdown(ctx) != nil {
			th.srv.Close()
		}
		th.served.Wait()
	})
}

func (th *Hub) stopHub() {
	th.cancel()
	select {
	case err := <-th.done:
		if err != nil && !errors.Is(err, context.Canceled) {
			th.t.Errorf("hub Run: %v", err)
		}
	case <-time.After(30 * time.Second):
		th.t.Error("hub did not stop within 30s")
	}
}

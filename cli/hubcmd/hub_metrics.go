package hubcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// metricsServer serves a hub's metrics at /metrics on a listener of its
// own (--metrics-listen), without the admin token: the address is meant to
// be an operator's internal one, reached by Prometheus only.
type metricsServer struct {
	url string // http://ADDR
	srv *http.Server
}

// serveMetrics listens on addr and serves h's metrics until close. An
// empty addr serves nothing (nil server, nil error).
func serveMetrics(h *hub.Hub, addr string, log *slog.Logger) (*metricsServer, error) {
	if addr == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("metrics: listen: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", h.MetricsHandler())
	m := &metricsServer{url: "http://" + ln.Addr().String(), srv: &http.Server{
		Handler: mux,
		// A scrape is one small request: tight bounds, so an idle or slow
		// client cannot hold connections.
		ReadHeaderTimeout: 10 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
	}}
	go func() {
		if err := m.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics listener failed", "addr", addr, "err", err)
		}
	}()
	return m, nil
}

// close stops the listener; a nil server is a no-op.
func (m *metricsServer) close() {
	if m == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if m.srv.Shutdown(ctx) != nil {
		m.srv.Close()
	}
}

// banner is the startup line naming the metrics address, or "".
func (m *metricsServer) banner() string {
	if m == nil {
		return ""
	}
	return fmt.Sprintf("roomrelay hub metrics on %s/metrics (no token: keep this address internal)\n", m.url)
}

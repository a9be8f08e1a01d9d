package review

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"
)

// Server is the review page listening on a random loopback port.
type Server struct {
	h   *Handler
	ln  net.Listener
	log *slog.Logger
}

// Listen opens 127.0.0.1 on a random port (never another interface: the
// page changes what runs on this device).
func Listen(store Store, log *slog.Logger, opts ...Option) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("review: listen on 127.0.0.1: %w", err)
	}
	h, err := NewHandler(store, ln.Addr().String(), log, opts...)
	if err != nil {
		ln.Close()
		return nil, err
	}
	return &Server{h: h, ln: ln, log: log}, nil
}

// URL is the address to open, with its one-time token.
func (s *Server) URL() string { return s.h.URL() }

// Run serves until ctx ends, then shuts down (in-flight requests get a few
// seconds).
func (s *Server) Run(ctx context.Context) error {
	srv := &http.Server{
		Handler:           s.h,
		ReadHeaderTimeout: 10 * time.Second,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelWarn),
		BaseContext:       func(net.Listener) context.Context { return ctx },
	}
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Serve(s.ln) })
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if serr := srv.Shutdown(shCtx); serr != nil {
		srv.Close()
	}
	wg.Wait()
	if err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("review: serve: %w", err)
	}
	return nil
}

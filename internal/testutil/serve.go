package testutil

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"testing"
	"time"
)

// Server serves a handler on a loopback listener, as a hub's caller does.
type Server struct {
	ln  net.Listener
	srv *http.Server
	wg  sync.WaitGroup
}

// Serve listens on addr ("" for 127.0.0.1:0) and serves h until Close.
func Serve(t testing.TB, addr string, h http.Handler) *Server {
	t.Helper()
	if addr == "" {
		addr = "127.0.0.1:0"
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen %s: %v", addr, err)
	}
	s := &Server{ln: ln, srv: &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}}
	s.wg.Go(func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			t.Errorf("serve: %v", err)
		}
	})
	return s
}

// Addr is host:port.
func (s *Server) Addr() string { return s.ln.Addr().String() }

// URL is "http://" + Addr.
func (s *Server) URL() string { return "http://" + s.Addr() }

// Close stops accepting, waits briefly for requests, then closes the rest.
func (s *Server) Close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if s.srv.Shutdown(ctx) != nil {
		s.srv.Close()
	}
	s.wg.Wait()
}

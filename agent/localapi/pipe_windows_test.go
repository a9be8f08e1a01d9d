package localapi

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"
)

// listenTest listens on a pipe named after a fresh temp dir.
func listenTest(t *testing.T) (net.Listener, Endpoint) {
	t.Helper()
	ln, ep, err := Listen(ListenConfig{StateDir: filepath.Join(t.TempDir(), "state")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln, ep
}

// within fails the test unless f returns in 10 s (a hang is the failure
// these tests look for; the bound is no timing assertion).
func within(t *testing.T, what string, f func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); f() }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatalf("%s did not return", what)
	}
}

func TestPipeNameTakenRefusesToStart(t *testing.T) {
	t.Parallel()
	cfg := ListenConfig{StateDir: filepath.Join(t.TempDir(), "state")}
	ln, _, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := Listen(cfg); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen on a held name: %v, want ErrInUse", err)
	}
	ln.Close()
	// Closing frees the name.
	ln2, _, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen after Close: %v", err)
	}
	ln2.Close()
}

// Between two Accepts the listener still holds the name: a connection that
// comes and goes must not leave it free for another process to take.
func TestPipeNameHeldBetweenAccepts(t *testing.T) {
	t.Parallel()
	cfg := ListenConfig{StateDir: filepath.Join(t.TempDir(), "state")}
	ln, ep, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	srv, cli := accepted(t, ln, ep)
	cli.Close()
	srv.Close()
	if l2, _, err := Listen(cfg); !errors.Is(err, ErrInUse) {
		if l2 != nil {
			l2.Close()
		}
		t.Fatalf("Listen while the first listener is open, no Accept pending: %v, want ErrInUse", err)
	}
}

func TestPipeCloseUnblocksAccept(t *testing.T) {
	t.Parallel()
	ln, _ := listenTest(t)
	errc := make(chan error, 1)
	go func() {
		_, err := ln.Accept()
		errc <- err
	}()
	time.Sleep(50 * time.Millisecond) // let Accept wait in ConnectNamedPipe (either order passes)
	within(t, "Close", func() { ln.Close() })
	within(t, "Accept after Close", func() {
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Errorf("Accept after Close: %v, want net.ErrClosed", err)
		}
	})
	if _, err := ln.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("Accept on a closed listener: %v", err)
	}
}

// accepted dials ep and returns both ends.
func accepted(t *testing.T, ln net.Listener, ep Endpoint) (server, client net.Conn) {
	t.Helper()
	type res struct {
		c   net.Conn
		err error
	}
	ch := make(chan res, 1)
	go func() { c, err := ln.Accept(); ch <- res{c, err} }()
	client, err := dialRaw(ep)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { client.Close() })
	var r res
	within(t, "Accept", func() { r = <-ch })
	if r.err != nil {
		t.Fatal(r.err)
	}
	t.Cleanup(func() { r.c.Close() })
	return r.c, client
}

func TestPipeRoundTripPeerAndEOF(t *testing.T) {
	t.Parallel()
	ln, ep := listenTest(t)
	srv, cli := accepted(t, ln, ep)
	p, err := PeerOf(srv)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Owner || p.PID != os.Getpid() || p.SID == "" {
		t.Fatalf("peer = %+v, want this process as the owner", p)
	}
	if _, err := cli.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(srv, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("read %q %v", buf, err)
	}
	// What the server wrote before closing stays readable, then EOF.
	if _, err := srv.Write([]byte("pong")); err != nil {
		t.Fatal(err)
	}
	srv.Close()
	b, err := io.ReadAll(cli)
	if err != nil || string(b) != "pong" {
		t.Fatalf("client read after the server closed: %q %v", b, err)
	}
}

func TestPipeDeadlineAndCloseUnblockRead(t *testing.T) {
	t.Parallel()
	ln, ep := listenTest(t)
	srv, _ := accepted(t, ln, ep)
	srv.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	within(t, "Read past its deadline", func() {
		_, err := srv.Read(make([]byte, 1))
		var ne net.Error
		if !errors.As(err, &ne) || !ne.Timeout() {
			t.Errorf("Read past the deadline: %v, want a timeout", err)
		}
	})
	// A deadline in the past also ends a read already waiting (what
	// http.Server does to stop a connection's background read).
	srv.SetReadDeadline(time.Time{})
	errc := make(chan error, 1)
	go func() { _, err := srv.Read(make([]byte, 1)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	srv.SetReadDeadline(time.Unix(1, 0))
	within(t, "a waiting Read after SetReadDeadline(past)", func() {
		if err := <-errc; !errors.Is(err, os.ErrDeadlineExceeded) {
			t.Errorf("waiting Read: %v, want os.ErrDeadlineExceeded", err)
		}
	})
	srv.SetReadDeadline(time.Time{})
	go func() { _, err := srv.Read(make([]byte, 1)); errc <- err }()
	time.Sleep(20 * time.Millisecond)
	srv.Close()
	within(t, "a waiting Read after Close", func() {
		if err := <-errc; !errors.Is(err, net.ErrClosed) {
			t.Errorf("waiting Read after Close: %v, want net.ErrClosed", err)
		}
	})
}

// Clients at once all get served: the listener puts a new instance in
// place before it hands one out.
func TestPipeManyClients(t *testing.T) {
	t.Parallel()
	ln, ep := listenTest(t)
	const n = 8
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); io.Copy(c, c) }()
		}
	}()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			c, err := dialEndpoint(ctx, ep)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			msg := []byte{'a' + byte(i)}
			c.Write(msg)
			got := make([]byte, 1)
			if _, err := io.ReadFull(c, got); err != nil || got[0] != msg[0] {
				errs <- errors.New("echo: " + string(got))
			}
		})
	}
	within(t, "the clients", wg.Wait)
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestDialNoAgent(t *testing.T) {
	t.Parallel()
	ep := Endpoint{Transport: TransportNpipe, Path: `\\.\pipe\roomrelay-test-nobody-` + filepath.Base(t.TempDir())}
	if _, err := dialRaw(ep); err == nil {
		t.Fatal("dial of a pipe nobody serves succeeded")
	}
}

package testutil

import (
	"context"
	"net"
	"sync"
)

// PipeListener is an in-memory net.Listener: each Dial makes a net.Pipe and
// hands one end to Accept. No socket is opened, so it works inside a
// testing/synctest bubble, where a blocked pipe read or write is durably
// blocked and deadlines run on the bubble's fake clock. Create it inside the
// bubble that uses it. A net.Pipe is unbuffered: a write waits for the peer
// to read it.
type PipeListener struct {
	conns chan net.Conn
	done  chan struct{}
	once  sync.Once
}

// NewPipeListener returns a listener that accepts until Close.
func NewPipeListener() *PipeListener {
	return &PipeListener{conns: make(chan net.Conn), done: make(chan struct{})}
}

// Accept waits for the next Dial.
func (l *PipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

// Close makes Accept and Dial fail; connections already made stay open.
func (l *PipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

// Addr is a placeholder "pipe" address.
func (l *PipeListener) Addr() net.Addr { return pipeAddr{} }

// Dial connects to the listener; network and address are ignored, so it can
// stand in for a net.Dialer's DialContext.
func (l *PipeListener) Dial(ctx context.Context, network, address string) (net.Conn, error) {
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-ctx.Done():
	case <-l.done:
	}
	client.Close()
	server.Close()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	return nil, net.ErrClosed
}

type pipeAddr struct{}

func (pipeAddr) Network() string { return "pipe" }
func (pipeAddr) String() string  { return "pipe" }

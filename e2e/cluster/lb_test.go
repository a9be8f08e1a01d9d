//go:build linux

package cluster

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// balancer is a TCP load balancer on loopback, as an operator would put in
// front of hub nodes: each new connection goes to the next upstream in
// round robin, skipping one that refuses the connection. A connection ends
// on both sides when either side closes.
//
// hold stops forwarding an upstream's bytes to its clients (they are
// counted, then dropped) so a test can put a command "in flight" on a node
// before killing it: the hub wrote the frame, the agent never gets it.
type balancer struct {
	ln   net.Listener
	ups  []*upstream
	next atomic.Uint64
	wg   sync.WaitGroup

	mu    sync.Mutex
	conns map[net.Conn]struct{}
	done  bool
}

type upstream struct {
	addr string
	hold atomic.Bool
	held atomic.Int64 // bytes swallowed while held
}

func newBalancer(t testing.TB, addrs ...string) *balancer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &balancer{ln: ln, conns: map[net.Conn]struct{}{}}
	for _, a := range addrs {
		b.ups = append(b.ups, &upstream{addr: a})
	}
	b.wg.Add(1)
	go b.accept()
	t.Cleanup(b.close)
	return b
}

func (b *balancer) url() string { return "http://" + b.ln.Addr().String() }

func (b *balancer) upstream(addr string) *upstream {
	for _, u := range b.ups {
		if u.addr == addr {
			return u
		}
	}
	return nil
}

func (b *balancer) accept() {
	defer b.wg.Done()
	for {
		c, err := b.ln.Accept()
		if err != nil {
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			b.serve(c)
		}()
	}
}

// dial tries every upstream once, starting at the next in turn.
func (b *balancer) dial() (net.Conn, *upstream) {
	start := int(b.next.Add(1))
	for i := range b.ups {
		u := b.ups[(start+i)%len(b.ups)]
		c, err := net.DialTimeout("tcp", u.addr, 2*time.Second)
		if err == nil {
			return c, u
		}
	}
	return nil, nil
}

func (b *balancer) serve(client net.Conn) {
	up, u := b.dial()
	if up == nil {
		client.Close()
		return
	}
	if !b.track(client, up) {
		return
	}
	defer b.untrack(client, up)
	var once sync.Once
	closeBoth := func() { once.Do(func() { client.Close(); up.Close() }) }
	go func() {
		_, _ = io.Copy(up, client)
		closeBoth()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if u.hold.Load() {
				u.held.Add(int64(n))
			} else if _, werr := client.Write(buf[:n]); werr != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	closeBoth()
}

func (b *balancer) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.done {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *balancer) untrack(cs ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range cs {
		delete(b.conns, c)
	}
}

func (b *balancer) close() {
	b.mu.Lock()
	b.done = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.ln.Close()
	b.wg.Wait()
}

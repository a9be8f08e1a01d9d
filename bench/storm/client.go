//go:build linux

package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net"
	"net/http"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/relay"
)

// The real agent's reconnect shape (agent.DefaultBackoff): the n-th
// consecutive failure waits a uniformly random time in [0, Max(n)]; the
// count resets once a connection stayed up for ResetAfter. A drain frame's
// after_ms is obeyed, bounded like the agent's (agent.DefaultMaxDrainWait).
const helloDeadline = 30 * time.Second

// stormStart is when the current restart's signal was sent (unix
// nanoseconds), so each client can record its first dial after it.
var stormStart atomic.Int64

// client is a raw protocol client for one enrolled device: a real websocket
// with the roomrelay.v1 subprotocol and the device's token, the real
// hello/welcome, pings answered, commands answered, drain obeyed and the
// agent's backoff. It is not a full agent (no policy, store or audit log).
type client struct {
	i         int
	id, token string
	wsURL     string
	src       *net.TCPAddr // source address: one of many loopback IPs

	online      atomic.Bool
	welcomes    atomic.Int64
	lastWelcome atomic.Int64 // unix nanoseconds
	dialFails   atomic.Int64
	refused503  atomic.Int64 // dials answered 503 (a hub node starting or shutting down)
	drains      atomic.Int64
	firstDial   atomic.Int64 // unix nanoseconds of the first dial after the current storm began
	gaveUp      atomic.Bool
	why         atomic.Value // string: why it gave up
}

// srcAddr spreads clients over 127.0.0.0/8 source addresses, as a fleet
// comes from many addresses: the hub's per-address connection cap then
// sees a few clients per address, not all of them from 127.0.0.1.
func srcAddr(i int) *net.TCPAddr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, byte(1+i/250), byte(1+i%250))}
}

// run connects and stays connected until ctx ends or the hub refuses the
// device for good (the agent's only reasons to stop).
func (c *client) run(ctx context.Context) {
	attempt := 0
	for ctx.Err() == nil {
		up, drainAfter, fatal := c.session(ctx)
		if fatal != "" {
			c.why.Store(fatal)
			c.gaveUp.Store(true)
			return
		}
		var wait time.Duration
		switch {
		case drainAfter >= 0:
			wait, attempt = min(drainAfter, agent.DefaultMaxDrainWait), 0
		default:
			if up >= agent.DefaultBackoff.ResetAfter {
				attempt = 0
			}
			wait = time.Duration(rand.Int64N(int64(agent.DefaultBackoff.Max(attempt)) + 1))
			attempt++
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// session is one connection: it returns how long it was up after welcome,
// the drain delay when the hub asked for one (else -1), and a reason when
// the hub refused the device for good.
func (c *client) session(ctx context.Context) (up, drainAfter time.Duration, fatal string) {
	drainAfter = -1
	if now := time.Now().UnixNano(); c.firstDial.Load() < stormStart.Load() {
		c.firstDial.Store(now) // only this client's goroutine writes it
	}
	nd := &net.Dialer{LocalAddr: c.src, Timeout: 10 * time.Second}
	d := websocket.Dialer{Subprotocols: []string{relay.Subprotocol}, HandshakeTimeout: helloDeadline, NetDialContext: nd.DialContext}
	conn, resp, err := d.DialContext(ctx, c.wsURL, http.Header{"Authorization": {"Bearer " + c.token}})
	if err != nil {
		c.dialFails.Add(1)
		if resp != nil && resp.StatusCode == http.StatusServiceUnavailable {
			c.refused503.Add(1)
		}
		if resp != nil && (resp.StatusCode == http.StatusUnauthorized || resp.StatusCode == http.StatusForbidden) {
			return 0, -1, "hub refused the token: " + resp.Status
		}
		return 0, -1, ""
	}
	defer conn.Close()
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	hello, _ := relay.Encode(&relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "storm", DeviceID: c.id, OS: "linux",
		Policy: []relay.ProjectPolicy{{Project: project, Commands: []string{relay.CmdReadRoom}}},
		Rooms:  []relay.RoomEntry{{Project: project, RoomID: "room-" + strconv.Itoa(c.i), Name: "Storm " + strconv.Itoa(c.i)}}})
	_ = conn.SetReadDeadline(time.Now().Add(helloDeadline))
	if err := conn.WriteMessage(websocket.TextMessage, hello); err != nil {
		c.dialFails.Add(1)
		return 0, -1, ""
	}
	_, data, err := conn.ReadMessage()
	if err != nil {
		c.dialFails.Add(1)
		return 0, -1, closeFatal(err)
	}
	f, err := relay.Decode(data, 0)
	w, ok := f.(*relay.Welcome)
	if err != nil || !ok {
		c.dialFails.Add(1)
		return 0, -1, ""
	}
	start := time.Now()
	c.lastWelcome.Store(start.UnixNano())
	c.welcomes.Add(1)
	c.online.Store(true)
	defer c.online.Store(false)

	// Any frame or ping pushes the read deadline out by 2.5 heartbeats, as
	// the agent does; silence beyond that is a lost connection.
	hb := w.Heartbeat()
	if hb <= 0 {
		hb = 25 * time.Second
	}
	extend := func() { _ = conn.SetReadDeadline(time.Now().Add(hb * 5 / 2)) }
	extend()
	conn.SetPingHandler(func(msg string) error {
		extend()
		return conn.WriteControl(websocket.PongMessage, []byte(msg), time.Now().Add(5*time.Second))
	})
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			return time.Since(start), -1, closeFatal(err)
		}
		extend()
		f, err := relay.Decode(data, 0)
		if err != nil {
			return time.Since(start), -1, ""
		}
		switch v := f.(type) {
		case *relay.Drain:
			c.drains.Add(1)
			_ = conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "draining as asked"), time.Now().Add(time.Second))
			return time.Since(start), time.Duration(max(v.AfterMS, 0)) * time.Millisecond, ""
		case *relay.Command:
			res, _ := relay.Encode(&relay.Result{ID: v.ID, OK: true, Result: []byte(`{}`)})
			if err := conn.WriteMessage(websocket.TextMessage, res); err != nil {
				return time.Since(start), -1, ""
			}
		}
	}
}

// closeFatal names a close the agent would stop for (revoked, protocol
// version); anything else is a reconnect.
func closeFatal(err error) string {
	var ce *websocket.CloseError
	if errors.As(err, &ce) && (ce.Code == relay.CloseRevoked || ce.Code == relay.CloseVersion) {
		return "closed " + strconv.Itoa(ce.Code) + ": " + ce.Text
	}
	return ""
}

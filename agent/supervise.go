package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay"
)

// The supervisor: dial, hello/welcome, serve a session, decide how long to
// wait before the next one (backoff, drain, wake, sleep).

// endKind says why a session (or a connection attempt) ended.
type endKind int

const (
	endError       endKind = iota // anything unexpected: back off
	endShutdown                   // ctx cancelled
	endRevoked                    // close 4003
	endVersion                    // close 4001
	endReplaced                   // close 4009: another instance of this device
	endDrain                      // the hub asked us to move to a new session
	endDrainClosed                // a draining node closed the session before the move: wait out its delay
	endWake                       // the wall clock jumped: reconnect now
	endSleep                      // AnnounceSleep
)

type sessionEnd struct {
	kind      endKind
	err       error
	prev      *handover     // endDrain: the old session, still serving
	sleepDone chan struct{} // endSleep
	after     time.Duration // endDrainClosed: what is left of the drain delay
	online    bool          // a welcome was received
	since     time.Time     // when it was received
}

// supervise is the connection loop: dial, serve, decide how long to wait.
func (a *Agent) supervise(ctx context.Context) error {
	attempt := 0 // consecutive failures since the last stable connection
	sessions := 0
	// A session handed over by a draining hub node keeps serving while the
	// next one is dialled; it is closed once that one is up, or given up.
	var prev *handover
	prevTries := 0
	var handoverWG sync.WaitGroup
	defer handoverWG.Wait()
	defer func() {
		if prev != nil {
			prev.finish(0)
		}
	}()
	for {
		if ctx.Err() != nil {
			return nil
		}
		if a.held.Load() {
			if stop := a.holdForSleep(ctx); stop {
				return nil
			}
		}
		// A pending wake or retry request is satisfied by the dial we are
		// about to make.
		select {
		case <-a.wake:
		default:
		}
		select {
		case <-a.retry:
		default:
		}
		a.setStatus(func(s *Status) {
			s.State = StateConnecting
			s.NextRetryAt = time.Time{}
		})
		end := a.connect(ctx, &sessions, prev, &handoverWG)
		if end.online {
			prev = nil // connect started its finish
		}
		if end.online && a.clock.Now().Sub(end.since) >= a.cfg.Backoff.ResetAfter {
			attempt = 0
		}
		if prev != nil && end.kind == endError {
			// The new session did not come up (the load balancer may have
			// picked the draining node again): retry soon while the old
			// one still serves.
			if prevTries++; prevTries < maxHandoverTries && prev.alive() {
				a.log.Info("next session not up yet; retrying while the old one serves", "err", end.err, "try", prevTries)
				if stop := a.wait(ctx, time.Duration(200+a.cfg.Rand(600))*time.Millisecond); stop {
					return nil
				}
				continue
			}
			prev.finish(0)
			prev = nil
		}
		a.setStatus(func(s *Status) {
			s.SessionID = ""
			s.ConnectedSince = time.Time{}
		})
		if end.err != nil && end.kind != endShutdown {
			a.recordError(end.err)
		}
		wait := time.Duration(-1) // -1: back off
		switch end.kind {
		case endShutdown:
			return nil
		case endRevoked:
			a.setStatus(func(s *Status) { s.State = StateNeedsEnrollment })
			return end.err
		case endVersion:
			a.setStatus(func(s *Status) { s.State = StateError })
			return end.err
		case endReplaced:
			a.log.Warn("the hub replaced this session with a newer one of the same device: is another roomrelay agent running with this device's identity?",
				"device", a.cfg.DeviceID)
		case endDrain:
			// Dial now; the old session serves meanwhile. No penalty after
			// a session that stayed up: the hub is fine and directs us.
			prev, prevTries = end.prev, 0
			if !a.drainedEarly(end) {
				attempt = 0
				continue
			}
			// A hub (or a balancer that keeps picking a draining node) can
			// drain every session at once. Such a drain counts as a failure:
			// the first one since the agent was last stable is free (a
			// rolling deploy), the next ones back off while the old session
			// still serves, so reconnects cannot loop at dial speed.
			if attempt == 0 {
				attempt = 1
				continue
			}
			a.log.Warn("the hub drained a session that had just begun; backing off before the next one", "attempt", attempt+1)
		case endDrainClosed:
			// The node asked for this delay to spread its agents' return
			// (it had nowhere to move them, or went first): keep to it,
			// without a failure's penalty unless the session had just begun
			// (as for endDrain).
			a.log.Info("the draining hub node closed the session; reconnecting after the delay it asked for", "after", end.after)
			wait = end.after
			switch {
			case !a.drainedEarly(end):
				attempt = 0
			case attempt == 0:
				attempt = 1
			default:
				bound := a.cfg.Backoff.Max(attempt)
				wait = max(wait, time.Duration(a.cfg.Rand(int64(bound)+1)))
				attempt++
			}
		case endWake:
			a.log.Info("woke from sleep (the OS said so, or the wall clock jumped): reconnecting now")
			continue
		case endSleep:
			close(end.sleepDone)
			continue
		default:
			a.log.Warn("connection to the hub failed", "err", end.err, "attempt", attempt+1)
		}
		if wait < 0 {
			max := a.cfg.Backoff.Max(attempt)
			wait = time.Duration(a.cfg.Rand(int64(max) + 1))
			attempt++
		}
		if stop := a.wait(ctx, wait); stop {
			return nil
		}
	}
}

// drainedEarly reports whether a drain ended a session that was never
// useful: it had been online for less than Backoff.ResetAfter. Such a drain
// counts as a failure for the backoff, so a hub that drains every session
// after 0 ms gets reconnects at the backoff's pace (full jitter up to its
// cap), not ~20 a second.
func (a *Agent) drainedEarly(end sessionEnd) bool {
	return !end.online || a.clock.Now().Sub(end.since) < a.cfg.Backoff.ResetAfter
}

// wait sleeps d on the agent's clock in state backoff. A wall-clock jump
// cuts it short; AnnounceSleep turns it into a hold. It reports true if ctx
// ended.
func (a *Agent) wait(ctx context.Context, d time.Duration) bool {
	a.setStatus(func(s *Status) {
		s.State = StateBackoff
		s.NextRetryAt = a.clock.Now().Add(d)
	})
	t := a.clock.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return true
	case <-t.C():
	case <-a.wake:
		a.log.Info("woke from sleep (the OS said so, or the wall clock jumped): skipping the backoff wait")
	case <-a.retry:
		a.log.Info("asked to retry now: skipping the backoff wait")
	case done := <-a.sleepReq:
		a.held.Store(true)
		close(done)
	}
	return false
}

// holdForSleep waits, after AnnounceSleep, for Resume, a wake or ctx.
func (a *Agent) holdForSleep(ctx context.Context) bool {
	a.setStatus(func(s *Status) {
		s.State = StateSleeping
		s.NextRetryAt = time.Time{}
	})
	for a.held.Load() {
		select {
		case <-ctx.Done():
			return true
		case <-a.wake: // a wall-clock jump or Resume
			a.held.Store(false)
		case done := <-a.sleepReq:
			close(done)
		}
	}
	return false
}

// watchWallClock detects a wake from sleep where the OS does not report it
// (SetOSWakeNotices): the monotonic clock stops while the machine is
// suspended and the wall clock does not, so between two ticks the wall
// clock runs ahead. The connection may then be dead without any error yet
// (the hub has long dropped it), and a backoff wait is pointless.
func (a *Agent) watchWallClock(ctx context.Context) {
	for {
		if a.osWake.Load() {
			select {
			case <-ctx.Done():
				return
			case <-a.osWakeCh:
			}
			continue
		}
		if a.tickWallClock(ctx) {
			return
		}
	}
}

// tickWallClock runs the detector's ticker until ctx ends (true) or the OS
// starts reporting sleep and wake (false).
func (a *Agent) tickWallClock(ctx context.Context) bool {
	t := a.clock.NewTicker(a.cfg.WakeCheck)
	defer t.Stop()
	prevWall, prevMono := a.clock.Now().Round(0), a.clock.Monotonic()
	for {
		select {
		case <-ctx.Done():
			return true
		case <-a.osWakeCh:
			if a.osWake.Load() {
				return false
			}
			continue
		case <-t.C():
		}
		wall, mono := a.clock.Now().Round(0), a.clock.Monotonic()
		jump := wall.Sub(prevWall) - (mono - prevMono)
		prevWall, prevMono = wall, mono
		if jump > a.cfg.WakeThreshold {
			a.log.Info("wall clock jumped ahead of the monotonic clock", "jump", jump.Round(time.Second))
			a.held.Store(false)
			select {
			case a.wake <- struct{}{}:
			default:
			}
		}
	}
}

// dial opens the websocket. A 401 is final (ErrNeedsEnrollment).
func (a *Agent) dial(ctx context.Context) (*websocket.Conn, error) {
	h := http.Header{}
	h.Set("Authorization", "Bearer "+a.cfg.Token)
	h.Set("User-Agent", "roomrelay-agent/"+a.cfg.Version)
	dctx, cancel := context.WithTimeout(ctx, a.cfg.HandshakeTimeout)
	defer cancel()
	conn, resp, err := a.cfg.Dial(dctx, a.connURL, h)
	if resp != nil && resp.Body != nil {
		resp.Body.Close()
	}
	if err != nil {
		if resp != nil && resp.StatusCode == http.StatusUnauthorized {
			return nil, fmt.Errorf("%w (HTTP 401 from %s)", ErrNeedsEnrollment, a.cfg.HubURL)
		}
		if resp != nil {
			return nil, fmt.Errorf("connect to hub: HTTP %s: %w", resp.Status, err)
		}
		if ex := tlsfiles.Explain(err); ex != nil {
			return nil, fmt.Errorf("connect to hub: %w", ex)
		}
		return nil, fmt.Errorf("connect to hub: %w", err)
	}
	if p := conn.Subprotocol(); p != relay.Subprotocol {
		conn.Close()
		return nil, fmt.Errorf("connect to hub: it answered with subprotocol %q, want %q (is this a roomrelay hub of a matching version?)", p, relay.Subprotocol)
	}
	return conn, nil
}

// maxHandoverTries bounds the dials made while a handed-over session still
// serves.
const maxHandoverTries = 5

// connect dials, does the hello/welcome handshake and serves the session.
// With prev (a handed-over session) it closes prev once the new session is
// up, in a goroutine on wg.
func (a *Agent) connect(ctx context.Context, sessions *int, prev *handover, wg *sync.WaitGroup) sessionEnd {
	conn, err := a.dial(ctx)
	if err != nil {
		switch {
		case ctx.Err() != nil:
			return sessionEnd{kind: endShutdown}
		case errors.Is(err, ErrNeedsEnrollment):
			return sessionEnd{kind: endRevoked, err: err}
		}
		return sessionEnd{kind: endError, err: err}
	}
	// Reads below block on the socket; a cancelled ctx must not wait for
	// the handshake timeout.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	w, err := a.handshake(conn)
	if !stop() || ctx.Err() != nil {
		conn.Close()
		return sessionEnd{kind: endShutdown}
	}
	if err != nil {
		conn.Close()
		end := classifyReadErr(err)
		end.err = fmt.Errorf("handshake: %w", end.err)
		return end
	}

	hb := clampHeartbeat(w.Heartbeat())
	a.offset.Store(0)
	if !w.ServerTime.IsZero() {
		if off := w.ServerTime.Sub(a.clock.Now()); off > skewTolerance || off < -skewTolerance {
			a.offset.Store(int64(off))
			a.log.Warn("device clock differs from the hub's; judging deadlines on the hub's clock", "offset", off.Round(time.Millisecond))
		}
	}
	since := a.clock.Now()
	*sessions++
	a.setStatus(func(s *Status) {
		s.State = StateOnline
		s.SessionID = relay.PrintableLine(relay.CutUTF8(w.SessionID, 128)) // the hub's text
		s.ConnectedSince = since
		s.NextRetryAt = time.Time{}
		if *sessions > 1 {
			s.Reconnects++
		}
	})
	a.log.Info("online", "session", w.SessionID, "heartbeat", hb)
	if prev != nil {
		wg.Go(func() { prev.finish(maxHandoverWait) })
	}

	end := a.serve(ctx, conn, hb)
	end.online, end.since = true, since
	return end
}

// handshake sends hello and reads welcome.
func (a *Agent) handshake(conn *websocket.Conn) (*relay.Welcome, error) {
	conn.SetReadLimit(int64(a.cfg.MaxFrame))
	var policy []relay.ProjectPolicy
	if a.cfg.Policy != nil {
		policy = a.cfg.Policy()
	}
	rooms := []relay.RoomEntry{} // never nil: nil would read as an agent without a directory
	if a.cfg.Rooms != nil {
		ctx, cancel := context.WithTimeout(context.Background(), a.cfg.HandshakeTimeout)
		if r := a.cfg.Rooms(ctx); r != nil {
			rooms = r
		}
		cancel()
	}
	var prov *relay.ProviderState
	if a.cfg.Provider != nil {
		prov = a.cfg.Provider()
	}
	var head *relay.AuditHead
	if a.cfg.AuditHead != nil {
		head = a.cfg.AuditHead()
	}
	b, err := relay.Encode(&relay.Hello{
		Protocol:     relay.ProtocolVersion,
		AgentVersion: a.cfg.Version,
		DeviceID:     a.cfg.DeviceID,
		OS:           a.cfg.OS,
		Policy:       policy,
		Rooms:        rooms,
		Provider:     prov,
		AuditHead:    head,
	})
	if err != nil {
		return nil, err
	}
	deadline := time.Now().Add(a.cfg.HandshakeTimeout)
	conn.SetWriteDeadline(deadline)
	if err := conn.WriteMessage(websocket.TextMessage, b); err != nil {
		return nil, fmt.Errorf("send hello: %w", err)
	}
	conn.SetReadDeadline(deadline)
	_, data, err := conn.ReadMessage()
	if err != nil {
		return nil, fmt.Errorf("wait for welcome: %w", err)
	}
	f, err := relay.Decode(data, a.cfg.MaxFrame)
	if err != nil {
		closeWith(conn, err)
		return nil, fmt.Errorf("bad welcome from hub: %w", err)
	}
	w, ok := f.(*relay.Welcome)
	if !ok {
		err := &relay.ProtocolError{Close: relay.CloseProtocolError, Reason: fmt.Sprintf("expected welcome, got %s", f.FrameType())}
		closeWith(conn, err)
		return nil, err
	}
	return w, nil
}

func clampHeartbeat(d time.Duration) time.Duration {
	return min(max(d, 10*time.Millisecond), 10*time.Minute)
}

// closeWith sends the close frame a protocol error calls for.
func closeWith(conn *websocket.Conn, err error) {
	code, reason := relay.CloseProtocolError, err.Error()
	var pe *relay.ProtocolError
	if errors.As(err, &pe) {
		code, reason = pe.Close, pe.Reason
	}
	if len(reason) > 120 {
		reason = reason[:120]
	}
	conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(code, reason), time.Now().Add(closeWait))
}

// classifyReadErr maps how the hub ended a connection to what to do next.
func classifyReadErr(err error) sessionEnd {
	var ce *websocket.CloseError
	if errors.As(err, &ce) {
		switch ce.Code {
		case relay.CloseRevoked:
			return sessionEnd{kind: endRevoked, err: fmt.Errorf("%w (hub closed the connection: %s)", ErrNeedsEnrollment, ce.Text)}
		case relay.CloseVersion:
			return sessionEnd{kind: endVersion, err: fmt.Errorf("%w (hub: %s)", ErrProtocolVersion, ce.Text)}
		case relay.CloseReplaced:
			return sessionEnd{kind: endReplaced, err: fmt.Errorf("hub replaced this session with a newer one of the same device: %w", err)}
		}
		return sessionEnd{kind: endError, err: fmt.Errorf("hub closed the connection: %w", err)}
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return sessionEnd{kind: endError, err: fmt.Errorf("no frame from the hub within the read deadline (connection lost silently): %w", err)}
	}
	return sessionEnd{kind: endError, err: err}
}

package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

var errSessionGone = errors.New("the connection to the hub is gone")

// session is one live connection after welcome. The reader goroutine reads
// the socket; the writer goroutine and the workers answering commands write
// it, one data frame at a time under wmu (gorilla allows one reader and one
// writer; WriteControl and Close may come from anywhere).
type session struct {
	conn *websocket.Conn
	hb   time.Duration
	// watch is the session's one liveness timer (see writeLoop): it is
	// re-armed when it fires, never moved by a frame.
	watch *time.Timer
	// start and heard: the last frame from the hub came heard nanoseconds
	// after start (monotonic), written by the reader, read by the writer.
	start time.Time
	heard atomic.Int64

	out        chan outFrame
	wmu        sync.Mutex    // held while a data frame is written (write, writeLoop)
	wfail      chan error    // cap 1: write failed; the writer ends the session
	done       chan struct{} // closed at teardown: nobody may wait on it any more
	readerDone chan struct{}
	rerr       error // set before readerDone closes
	writerDone chan struct{}
	werr       error // set before writerDone closes
	drain      chan *relay.Drain
	teardown   sync.Once

	bmu   sync.Mutex
	busy  int           // command deliveries on this session not yet answered
	eased chan struct{} // cap 1: busy went down
}

// enter and leave count a command delivery from its frame to its answer, so
// a handed-over session closes only once its commands have answered on it.
func (s *session) enter() {
	s.bmu.Lock()
	s.busy++
	s.bmu.Unlock()
}

func (s *session) leave() {
	s.bmu.Lock()
	s.busy--
	s.bmu.Unlock()
	select {
	case s.eased <- struct{}{}:
	default:
	}
}

// quiet waits until no delivery on s is unanswered, or d passed.
func (s *session) quiet(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		s.bmu.Lock()
		n := s.busy
		s.bmu.Unlock()
		if n <= 0 {
			return true
		}
		select {
		case <-s.eased:
		case <-s.readerDone:
			return false // gone: its answers cannot be sent anyway
		case <-t.C:
			return false
		}
	}
}

// handover is a session whose hub node is draining, kept serving while the
// agent opens its next session (make-before-break).
type handover struct {
	s  *session
	wg *sync.WaitGroup // its reader and writer
}

// maxHandoverWait bounds how long an old session waits for its commands
// after the new session is up.
const maxHandoverWait = 10 * time.Second

// finish closes the old session once the hub said no command follows (its
// second drain frame) and those it got have answered, or wait passed.
func (h *handover) finish(wait time.Duration) {
	t := time.NewTimer(wait)
	select {
	case <-h.s.drain:
	case <-h.s.readerDone:
	case <-t.C:
	}
	t.Stop()
	h.s.quiet(wait)
	h.s.closeGracefully(websocket.CloseNormalClosure, "moved to a new session")
	h.wg.Wait()
}

// alive reports whether the old session still reads from the hub.
func (h *handover) alive() bool {
	select {
	case <-h.s.readerDone:
		return false
	default:
		return true
	}
}

type outFrame struct {
	data  []byte
	close []byte     // a close frame payload, written after the frames before it
	ack   chan error // optional, buffered 1
}

// write writes a data frame from the calling goroutine: a command's worker
// writes its result itself, saving one of the two goroutine hand-offs per
// command (reader → worker → writer: 42 µs of CPU per read_room together
// in session 12's profile). wmu keeps one writer on the socket at a time,
// so frames stay whole and in the order each goroutine wrote them; a failed
// write ends the session through the writer, as its own failures do.
func (s *session) write(data []byte) error {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	select {
	case <-s.writerDone:
		return errSessionGone
	case <-s.done:
		return errSessionGone
	default:
	}
	err := s.writeData(data)
	if err != nil {
		select {
		case s.wfail <- err:
		default:
		}
	}
	return err
}

// writeData writes one data frame; wmu is held.
func (s *session) writeData(data []byte) error {
	s.conn.SetWriteDeadline(time.Now().Add(writeWait))
	err := s.conn.WriteMessage(websocket.TextMessage, data)
	// Disarmed once written: see the ping handler.
	s.conn.SetWriteDeadline(time.Time{})
	return err
}

// sendWait queues a frame and waits until it was written to the socket.
func (s *session) sendWait(data []byte) error {
	ack := make(chan error, 1)
	select {
	case s.out <- outFrame{data: data, ack: ack}:
	case <-s.writerDone:
		return errSessionGone
	case <-s.done:
		return errSessionGone
	}
	select {
	case err := <-ack:
		return err
	case <-s.writerDone:
		// The writer may have written it just before stopping.
		select {
		case err := <-ack:
			return err
		default:
			return errSessionGone
		}
	case <-s.done:
		return errSessionGone
	}
}

// serve runs a session until it ends, and tears it down.
func (a *Agent) serve(ctx context.Context, conn *websocket.Conn, hb time.Duration) sessionEnd {
	s := &session{
		conn:       conn,
		hb:         hb,
		watch:      time.NewTimer(pingAfterSilence(hb)),
		start:      time.Now(),
		out:        make(chan outFrame, outBuffer),
		wfail:      make(chan error, 1),
		done:       make(chan struct{}),
		readerDone: make(chan struct{}),
		writerDone: make(chan struct{}),
		drain:      make(chan *relay.Drain, 1),
		eased:      make(chan struct{}, 1),
	}
	var wg sync.WaitGroup
	wg.Go(func() { a.readLoop(s) })
	wg.Go(func() { a.writeLoop(s) })
	handedOver := false
	defer func() {
		if !handedOver {
			s.close()
			wg.Wait()
		}
	}()
	var moveAt <-chan time.Time // set by a drain frame
	var drainBy time.Time       // when that frame asked us to move
	// endedWhileDraining: the node closed the socket before the move it
	// asked for; the rest of its delay replaces the backoff.
	endedWhileDraining := func(end sessionEnd) sessionEnd {
		if drainBy.IsZero() || end.kind != endError {
			return end
		}
		return sessionEnd{kind: endDrainClosed, err: end.err, after: max(drainBy.Sub(a.clock.Now()), 0)}
	}

	var paced Timer // set while a state event waits for its pace
	defer func() {
		if paced != nil {
			paced.Stop()
		}
	}()
	for {
		next, err := a.flushOutbox(s)
		if err != nil {
			return sessionEnd{kind: endError, err: fmt.Errorf("send queued events: %w", err)}
		}
		if paced != nil {
			paced.Stop()
			paced = nil
		}
		var pacedC <-chan time.Time
		if !next.IsZero() {
			paced = a.clock.NewTimer(max(next.Sub(a.clock.Now()), 0))
			pacedC = paced.C()
		}
		select {
		case <-pacedC:
		case <-ctx.Done():
			// Let running commands answer over this socket, then close cleanly.
			a.cmds.waitIdle(a.cmds.beginStopping())
			s.closeGracefully(websocket.CloseNormalClosure, "agent shutting down")
			return sessionEnd{kind: endShutdown}
		case <-s.readerDone:
			return endedWhileDraining(classifyReadErr(s.rerr))
		case <-s.writerDone:
			return endedWhileDraining(sessionEnd{kind: endError, err: fmt.Errorf("write to hub: %w", s.werr)})
		case d := <-s.drain:
			// Keep serving here until the spread delay the hub chose, then
			// open the next session before closing this one.
			after := drainWait(d.AfterMS, a.cfg.MaxDrainWait)
			drainBy = a.clock.Now().Add(after)
			a.log.Info("hub node draining: moving to a new session", "after", after, "reason", d.Reason)
			t := a.clock.NewTimer(after)
			defer t.Stop()
			moveAt = t.C()
		case <-moveAt:
			handedOver = true
			return sessionEnd{kind: endDrain, prev: &handover{s: s, wg: &wg}}
		case <-a.wake:
			// After a sleep the hub has most likely dropped us already; a
			// close frame is a courtesy, not worth waiting for.
			s.conn.WriteControl(websocket.CloseMessage,
				websocket.FormatCloseMessage(websocket.CloseGoingAway, "woke from sleep, reconnecting"), time.Now().Add(100*time.Millisecond))
			return sessionEnd{kind: endWake}
		case done := <-a.sleepReq:
			b, err := relay.Encode(&relay.Event{Event: relay.EventSleeping, Time: a.clock.Now().UTC()})
			if err == nil {
				err = s.sendWait(b)
			}
			if err != nil {
				a.log.Warn("could not announce sleep to the hub", "err", err)
			}
			s.closeGracefully(websocket.CloseNormalClosure, "going to sleep")
			a.held.Store(true)
			return sessionEnd{kind: endSleep, sleepDone: done}
		case <-a.kick:
		}
	}
}

// flushOutbox sends queued events in order, dropping each batch from the
// persisted queue only after it was written. A state event whose kind was
// sent less than StatePace ago stays queued (a newer one of its kind
// replaces it there); flushOutbox returns when the first of those may go
// (zero if none waits).
func (a *Agent) flushOutbox(s *session) (time.Time, error) {
	held := func(kind string) (time.Time, bool) {
		until := a.stateSent[kind].Add(StatePace)
		return until, a.clock.Now().Before(until)
	}
	for {
		batch, next := a.outbox.ready(32, held)
		if len(batch) == 0 {
			return next, nil
		}
		var sent []uint64
		var err error
		for i := range batch {
			var b []byte
			if b, err = relay.Encode(&batch[i].ev); err != nil {
				break
			}
			if err = s.sendWait(b); err != nil {
				break
			}
			sent = append(sent, batch[i].id)
			if kind := batch[i].ev.Event; StateEvents[kind] {
				if a.stateSent == nil {
					a.stateSent = map[string]time.Time{}
				}
				a.stateSent[kind] = a.clock.Now()
			}
		}
		if len(sent) > 0 {
			if derr := a.outbox.remove(sent); derr != nil {
				a.log.Warn("sent events stay queued and may be sent again", "err", derr)
			}
			a.setCounts(func(st *Status) { st.QueuedEvents = a.outbox.len() })
		}
		if err != nil {
			return time.Time{}, err
		}
	}
}

// close tears the session down: senders give up, the socket closes, and
// both goroutines return.
func (s *session) close() {
	s.teardown.Do(func() {
		close(s.done)
		s.conn.Close()
	})
}

// closeGracefully sends a close frame and waits briefly for the hub's echo,
// so the hub sees a clean close (offline at once) rather than a lost one.
func (s *session) closeGracefully(code int, reason string) {
	msg := websocket.FormatCloseMessage(code, reason)
	// Through the writer, so results queued before it go out first.
	ack := make(chan error, 1)
	var err error
	t0 := time.NewTimer(closeWait)
	select {
	case s.out <- outFrame{close: msg, ack: ack}:
		select {
		case err = <-ack:
		case <-s.writerDone:
			err = errSessionGone
		case <-t0.C:
			err = errSessionGone
		}
	case <-s.writerDone:
		err = errSessionGone
	case <-t0.C:
		err = errSessionGone
	}
	t0.Stop()
	if err == nil {
		t := time.NewTimer(closeWait)
		defer t.Stop()
		select {
		case <-s.readerDone:
		case <-t.C:
		}
	}
	s.close()
}

// readLoop reads frames until the connection fails. Any frame, ping or pong
// is noted as heard; the writer's watch ends the read after 2.5 heartbeats
// without one (a lost connection).
func (a *Agent) readLoop(s *session) {
	defer close(s.readerDone)
	conn := s.conn
	// Noting the time is all a frame does: a read deadline or timer moved
	// later on every frame leaves the runtime's timer heap holding the old
	// time, and the runtime wakes for it anyway (an idle agent's main
	// wakeup before #30.6, 12.5 s after every hub ping).
	extend := func() { s.heard.Store(int64(time.Since(s.start))) }
	conn.SetReadDeadline(time.Time{}) // the handshake's deadline
	conn.SetPongHandler(func(string) error { extend(); return nil })
	conn.SetPingHandler(func(msg string) error {
		extend()
		// No write deadline: an armed deadline is a runtime timer that
		// fires writeWait after the pong was long written, one more wakeup
		// of an idle agent per heartbeat. A pong that cannot be written is
		// bounded anyway: the read deadline closes the connection.
		err := conn.WriteControl(websocket.PongMessage, []byte(msg), time.Time{})
		if errors.Is(err, websocket.ErrCloseSent) {
			return nil
		}
		return err
	})
	for {
		_, data, err := conn.ReadMessage()
		if err != nil {
			s.rerr = err
			return
		}
		extend()
		f, err := relay.Decode(data, a.cfg.MaxFrame)
		if err != nil {
			closeWith(conn, err)
			s.rerr = fmt.Errorf("hub sent a bad frame: %w", err)
			return
		}
		switch v := f.(type) {
		case *relay.Command:
			a.cmds.dispatch(s, v)
		case *relay.Cancel:
			a.cmds.cancelCommand(v.ID)
		case *relay.Drain:
			select {
			case s.drain <- v:
			default:
			}
		default:
			err := &relay.ProtocolError{Close: relay.CloseProtocolError, Reason: fmt.Sprintf("unexpected %s frame from the hub", f.FrameType())}
			closeWith(conn, err)
			s.rerr = fmt.Errorf("hub sent a bad frame: %w", err)
			return
		}
	}
}

// pingAfterSilence is how long the agent waits without a frame from the
// hub before it pings. The hub pings every heartbeat and the agent's pongs
// feed the hub's read deadline, so against a live hub the agent never
// pings: before, both sides pinged every heartbeat, which doubled an idle
// agent's network wakeups. A hub that does not ping (or a lost ping) gets
// one after 2.05 heartbeats of silence, inside both sides' read deadline of
// 2.5 heartbeats. Why just past two heartbeats: the watch fires there, a
// twentieth of a heartbeat after the hub's second ping came in, so against
// a pinging hub it fires once every two heartbeats, right after a network
// wakeup (a short sleep, which the kernel does not stretch: a long epoll
// sleep overruns by 0.1 %, and the runtime's sysmon polls every 20 µs
// while a due timer waits for it).
func pingAfterSilence(hb time.Duration) time.Duration { return 2*hb + hb/20 }

// writeLoop writes the queued frames (events, the close frame); results
// are written by their workers (write). It also owns the session's
// liveness watch: when it fires, the hub silent for
// pingAfterSilence gets a ping, silent for 2.5 heartbeats ends the session
// (the read fails on its deadline), and otherwise the watch is re-armed
// from the last frame heard.
func (a *Agent) writeLoop(s *session) {
	defer close(s.writerDone)
	defer s.watch.Stop()
	lost, ping := s.hb*5/2, pingAfterSilence(s.hb)
	for {
		select {
		case <-s.done:
			return
		case f := <-s.out:
			var err error
			// Under wmu, the close frame too: it never lands between
			// the fragments of a result a worker is writing.
			s.wmu.Lock()
			if f.close != nil {
				err = s.conn.WriteControl(websocket.CloseMessage, f.close, time.Now().Add(closeWait))
			} else {
				err = s.writeData(f.data)
			}
			s.wmu.Unlock()
			if f.ack != nil {
				f.ack <- err
			}
			if err != nil {
				s.werr = err
				return
			}
		case err := <-s.wfail:
			s.werr = err
			return
		case <-s.watch.C:
			heard := time.Duration(s.heard.Load())
			quiet := time.Since(s.start) - heard
			switch {
			case quiet >= lost:
				// The reader returns with a timeout, which names the read
				// deadline; the teardown follows from there.
				s.conn.SetReadDeadline(time.Now())
			case quiet >= ping:
				if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
					s.werr = err
					return
				}
				s.watch.Reset(lost - quiet)
			default:
				s.watch.Reset(ping - quiet)
			}
		}
	}
}

// drainWait is how long a drain frame makes the agent wait: after_ms,
// clamped before the conversion (a huge value would overflow into a
// negative wait) and bounded by max, so a hub cannot silence the agent.
func drainWait(afterMS int64, max time.Duration) time.Duration {
	ms := min(afterMS, int64(max/time.Millisecond))
	if ms < 0 {
		ms = 0
	}
	return time.Duration(ms) * time.Millisecond
}

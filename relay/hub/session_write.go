package hub

import (
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

// What a session writes. Frames go through one queue; a writer goroutine
// runs only while the queue has items and exits when it is empty, so an
// idle agent has no writer and no write buffer (the upgrader's pool lends
// one per message). The heartbeat ping is a timer that queues a ping.

type outItem struct {
	data  []byte
	ping  bool
	close *closeReq
}

type closeReq struct {
	code   int
	reason string
}

// startWriting writes welcome, the first frame, then lets the writer run
// for what was queued meanwhile, and arms the heartbeat. Welcome is written
// on the caller's goroutine (setup's worker): the queue is held until it is
// out, so nothing else writes, and a connect does not start a writer
// goroutine for its one frame.
func (s *session) startWriting() {
	b, err := relay.Encode(&relay.Welcome{SessionID: s.id, HeartbeatMS: s.h.cfg.Heartbeat.Milliseconds(), ServerTime: s.h.cfg.Now().UTC()})
	if err != nil {
		s.log().Error("encode welcome", "err", err)
	}
	s.qmu.Lock()
	write := b != nil && !s.wdone
	s.qmu.Unlock()
	ok := !write || s.write(outItem{data: b})
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if !ok {
		s.wdone, s.queue = true, nil
	}
	s.held = false
	s.kickWriterLocked()
	s.pingT = time.AfterFunc(s.h.cfg.Heartbeat, s.pingTick)
}

// pingTick queues a ping and re-arms the timer, until writing stops.
func (s *session) pingTick() {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.wdone {
		return
	}
	if len(s.queue) < outQueue { // a full queue has writes pending: no ping needed
		s.queue = append(s.queue, outItem{ping: true})
		s.kickWriterLocked()
	}
	s.pingT.Reset(s.h.cfg.Heartbeat)
}

// enqueue hands an item to the writer; false when the queue is full or
// writing has stopped.
func (s *session) enqueue(it outItem) bool {
	s.qmu.Lock()
	defer s.qmu.Unlock()
	if s.wdone || (len(s.queue) >= outQueue && it.close == nil) {
		return false
	}
	s.queue = append(s.queue, it)
	s.kickWriterLocked()
	return true
}

// kickWriterLocked starts a writer unless one runs (or welcome is not
// queued yet). Called with qmu held.
func (s *session) kickWriterLocked() {
	if s.writing || s.held || s.wdone || len(s.queue) == 0 {
		return
	}
	s.writing = true
	s.writers.Add(1)
	go s.writeQueued()
}

// writeQueued writes what is queued and exits once the queue is empty. It
// owns every write except control frames gorilla writes itself.
func (s *session) writeQueued() {
	defer s.writers.Done()
	for {
		s.qmu.Lock()
		items := s.queue
		s.queue = nil
		if len(items) == 0 || s.wdone {
			s.writing = false
			s.qmu.Unlock()
			return
		}
		s.qmu.Unlock()
		for _, it := range items {
			if !s.write(it) {
				s.qmu.Lock()
				s.wdone, s.writing, s.queue = true, false, nil
				s.qmu.Unlock()
				return
			}
		}
	}
}

// write writes one item; false when nothing more may be written.
func (s *session) write(it outItem) bool {
	switch {
	case it.close != nil:
		_ = s.conn.WriteControl(websocket.CloseMessage,
			websocket.FormatCloseMessage(it.close.code, it.close.reason), time.Now().Add(writeWait))
		// The reader ends at the peer's echo or after closeWait.
		_ = s.conn.SetReadDeadline(time.Now().Add(closeWait))
		return false
	case it.ping:
		if err := s.conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait)); err != nil {
			s.abort(err)
			return false
		}
	default:
		_ = s.conn.SetWriteDeadline(time.Now().Add(writeWait))
		if err := s.conn.WriteMessage(websocket.TextMessage, it.data); err != nil {
			s.abort(err)
			return false
		}
	}
	return true
}

// stopWriting ends writing for good and waits for a running writer (the
// reader has stopped; a write in progress ends by its deadline).
func (s *session) stopWriting() {
	s.qmu.Lock()
	s.wdone, s.queue = true, nil
	t := s.pingT
	s.qmu.Unlock()
	if t != nil {
		t.Stop()
	}
	s.writers.Wait()
}

// abort ends a session whose socket cannot be written: the reader's next
// read fails at once.
func (s *session) abort(err error) {
	s.log().Info("write to agent failed", "err", err)
	s.closing.Store(true)
	_ = s.conn.SetReadDeadline(time.Now())
}

// send queues a frame; false if the session is closing or its queue is full.
func (s *session) send(f relay.Frame) bool {
	if s.closing.Load() {
		return false
	}
	b, err := relay.Encode(f)
	if err != nil {
		s.log().Error("encode frame", "err", err)
		return false
	}
	return s.enqueue(outItem{data: b})
}

// closeWith closes the socket with code and reason after the frames already
// queued. Safe from any goroutine; only the first call counts.
func (s *session) closeWith(code int, reason string) {
	s.closeOnce.Do(func() {
		s.closing.Store(true)
		s.sentClose.Store(int32(code))
		if !s.enqueue(outItem{close: &closeReq{code, reason}}) { // after what is queued
			// Writing has stopped (a failed write, or the end): nothing
			// will echo, so let the reader end now.
			_ = s.conn.SetReadDeadline(time.Now())
		}
	})
}

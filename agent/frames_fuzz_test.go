package agent

import (
	"context"
	"errors"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/relay"
)

// FuzzHubFrames sends whatever the fuzzer makes as a text frame from the hub
// to a real agent, then a probe command. The agent must never crash; it
// either answers the probe on the same connection, or it closed that
// connection with a protocol close code and comes back. Frames past the
// decoder's checks (unknown fields, huge arrays, odd types in known frames)
// land here.
//
//	go test ./agent -run '^$' -fuzz FuzzHubFrames -fuzztime 30s
func FuzzHubFrames(f *testing.F) {
	for _, s := range []string{
		`{"type":"command","id":"c1","project_id":"p1","name":"echo","args":{"x":[1,2,3]},"deadline":"2099-01-01T00:00:00Z","extra":{"a":[[[[]]]]}}`,
		`{"type":"command","id":"","name":"echo","deadline":"x"}`,
		`{"type":"cancel","id":"c1","more":[1,2,3]}`,
		`{"type":"drain","after_ms":-5}`,
		`{"type":"drain","after_ms":99999999999999}`,
		`{"type":"welcome","session_id":"again"}`,
		`{"type":"result","id":"x","ok":true}`,
		`{"type":"hello"}`,
		`{"type":"command","args":` + `[` + strings1000() + `]}`,
		`not json`,
		`{"type":null}`,
		`[]`,
	} {
		f.Add([]byte(s))
	}
	hub := newTestHub(f)
	a := newTestAgent(f, hub, "", func(c *Config) {
		c.Logger = nil
		c.MaxDrainWait = 50 * time.Millisecond // a fuzzed drain must not stall the run
	})
	var runs atomic.Int64
	a.Register("echo", func(ctx context.Context, cmd *relay.Command) (any, error) {
		runs.Add(1)
		return map[string]string{"ok": "yes"}, nil
	})
	start(f, a)
	conn := hub.next(f)
	probe := 0
	f.Fuzz(func(t *testing.T, data []byte) {
		drain(hub)
		hubWriteMu.Lock()
		err := conn.ws.WriteMessage(websocket.TextMessage, data)
		hubWriteMu.Unlock()
		if err == nil {
			probe++
			id := "probe-" + strconv.Itoa(probe)
			b, _ := relay.Encode(&relay.Command{ID: id, ProjectID: "p1", Name: "echo", Deadline: time.Now().Add(time.Minute)})
			hubWriteMu.Lock()
			err = conn.ws.WriteMessage(websocket.TextMessage, b)
			hubWriteMu.Unlock()
			if err == nil && answered(t, conn, id) {
				return
			}
		}
		// The agent closed the connection: with a protocol close code, and
		// it reconnects.
		<-conn.done
		var ce *websocket.CloseError
		if errors.As(conn.err, &ce) {
			switch ce.Code {
			// 1000 follows a drain frame (an input may be one; its close can
			// show only at the next input).
			case websocket.CloseNormalClosure, relay.CloseProtocolError, relay.CloseInvalidPayload, relay.CloseTooBig, websocket.CloseUnsupportedData, websocket.ClosePolicyViolation:
			default:
				t.Fatalf("input %q: the agent closed with %d %q", data, ce.Code, ce.Text)
			}
		}
		conn = hub.next(t)
	})
}

// answered waits for the probe's result on c; false when c ended first.
func answered(t *testing.T, c *hubConn, id string) bool {
	deadline := time.After(10 * time.Second)
	for {
		select {
		case fr := <-c.frames:
			if r, ok := fr.(*relay.Result); ok && r.ID == id {
				if !r.OK {
					t.Fatalf("probe %s failed: %+v", id, r.Error)
				}
				return true
			}
		case <-c.done:
			return false
		case <-deadline:
			t.Fatalf("no answer to %s and the connection stayed open", id)
		}
	}
}

// drain empties the test hub's bookkeeping channels, so many reconnects
// never block its handler.
func drain(h *testHub) {
	for {
		select {
		case <-h.auth:
		case <-h.hellos:
		default:
			return
		}
	}
}

func strings1000() string {
	b := make([]byte, 0, 2000)
	for i := range 1000 {
		if i > 0 {
			b = append(b, ',')
		}
		b = append(b, '1')
	}
	return string(b)
}

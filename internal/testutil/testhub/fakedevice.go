package testhub

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// FakeDevice connects as device dev (its token) to the hub at hubURL with a
// raw websocket, reports rooms in its hello, waits until the hub (asked with
// the admin token) says it is online, then answers every command with
// answer's result; a nil result is no answer at all. It ends with the test.
func FakeDevice(t testing.TB, hubURL, admin, token, dev string, rooms []relay.RoomEntry, answer func(*relay.Command) *relay.Result) {
	t.Helper()
	FakeDeviceCancels(t, hubURL, admin, token, dev, rooms, answer, nil)
}

// FakeDeviceCancels is FakeDevice that also reports every cancel frame the
// hub sends it to cancelled (when not nil), from its reading goroutine.
func FakeDeviceCancels(t testing.TB, hubURL, admin, token, dev string, rooms []relay.RoomEntry,
	answer func(*relay.Command) *relay.Result, cancelled func(*relay.Cancel)) {
	t.Helper()
	d := websocket.Dialer{Subprotocols: []string{relay.Subprotocol}}
	conn, _, err := d.Dial("ws"+strings.TrimPrefix(hubURL, "http")+relay.ConnectPath, http.Header{"Authorization": {"Bearer " + token}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	hello, _ := relay.Encode(&relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "fake", DeviceID: dev, OS: "linux", Rooms: rooms})
	if err := conn.WriteMessage(websocket.TextMessage, hello); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); err != nil { // welcome
		t.Fatal(err)
	}
	// Welcome goes out before the hub records the hello's rooms and the
	// presence; a call routed before them would find no device.
	cl := hubclient.New(hubURL, admin)
	testutil.Eventually(t, "the fake device online", func() bool {
		d, err := cl.Device(context.Background(), dev)
		return err == nil && d.Presence.State == hubapi.StateOnline
	})
	go func() {
		for {
			_, data, err := conn.ReadMessage()
			if err != nil {
				return
			}
			f, err := relay.Decode(data, 0)
			if c, ok := f.(*relay.Cancel); ok && err == nil && cancelled != nil {
				cancelled(c)
				continue
			}
			cmd, ok := f.(*relay.Command)
			if err != nil || !ok {
				continue
			}
			res := answer(cmd)
			if res == nil {
				continue
			}
			b, _ := relay.Encode(res)
			if conn.WriteMessage(websocket.TextMessage, b) != nil {
				return
			}
		}
	}()
}

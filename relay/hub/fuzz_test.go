package hub

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// FuzzCommandBody posts whatever the fuzzer makes as the body of
// POST /v1/devices/{id}/commands to a real hub with a connected agent. The
// hub must answer with a known status and a JSON body (a result, or an
// error body for a malformed request), and the agent's socket must survive:
// no request body can make the hub drop a device.
//
//	go test ./relay/hub -run '^$' -fuzz FuzzCommandBody -fuzztime 30s
func FuzzCommandBody(f *testing.F) {
	for _, s := range []string{
		`{"project_id":"p1","name":"read_room","args":{"room_id":"r"}}`,
		`{"project_id":"p1","name":"read_room","args":[1,2]}`,
		`{"project_id":"p1","name":"nope"}`,
		`{"id":"../x","project_id":"p1","name":"read_room"}`,
		`{"project_id":"p1","name":"read_room","timeout_ms":-1}`,
		`{"project_id":"p1","name":"read_room","args":{"room_id":"` + string(bytes.Repeat([]byte("r"), 300)) + `"}}`,
		`{"project_id":"p1","name":"read_room","args":{"room_id":"r","x":{"y":[[[[[]]]]]}}}`,
		`not json`,
		``,
	} {
		f.Add([]byte(s))
	}
	th := startHub(f, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(f, th.wsURL(), tok, dev)
	a.serve(func(c *relay.Command) *relay.Result {
		return &relay.Result{ID: c.ID, OK: true, Result: json.RawMessage(`{"ok":true}`)}
	})
	th.waitState(dev, hubapi.StateOnline) // routable: subscribed and recorded
	url := th.URL() + "/v1/devices/" + dev + "/commands"
	f.Fuzz(func(t *testing.T, body []byte) {
		req, _ := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+testAdmin)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatalf("post: %v", err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		switch resp.StatusCode {
		case 200, 400, 403, 404, 409, 413, 422, 429, 500, 503, 504:
		default:
			t.Fatalf("status %d for %q: %s", resp.StatusCode, body, b)
		}
		var res relay.Result
		var eb hubapi.ErrorBody
		if json.Unmarshal(b, &res) != nil && json.Unmarshal(b, &eb) != nil {
			t.Fatalf("not JSON: %q → %s", body, b)
		}
		if resp.StatusCode == 503 && res.Error != nil && res.Error.Code == relay.CodeDeviceOffline {
			t.Fatalf("the device went offline after %q: %s", body, b)
		}
		if len(th.localSessions(dev)) != 1 {
			t.Fatalf("the agent's session is gone after %q", body)
		}
	})
}

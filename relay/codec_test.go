package relay

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	deadline := time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)
	frames := []Frame{
		&Hello{Protocol: 1, AgentVersion: "v0.1.0", DeviceID: "dev_1", OS: "linux",
			Policy: []ProjectPolicy{{Project: "p1", Commands: []string{"read_room"}}}},
		&Welcome{SessionID: "s1", HeartbeatMS: 25000, ServerTime: deadline},
		&Command{ID: "c1", ProjectID: "p1", Name: "read_room", Args: json.RawMessage(`{"room_id":"r1"}`), Deadline: deadline},
		&Result{ID: "c1", OK: true, Result: json.RawMessage(`{"id":"r1"}`)},
		&Result{ID: "c2", Error: Errorf(CodeExpired, "too late")},
		&Cancel{ID: "c1"},
		&Event{Event: EventSleeping, Time: deadline},
		&Drain{AfterMS: 1500, Reason: "deploy"},
	}
	for _, f := range frames {
		b, err := Encode(f)
		if err != nil {
			t.Fatalf("encode %T: %v", f, err)
		}
		if !strings.HasPrefix(string(b), `{"type":"`+f.FrameType()+`"`) {
			t.Errorf("encoded %T does not start with its type: %s", f, b)
		}
		got, err := Decode(b, 0)
		if err != nil {
			t.Fatalf("decode %s: %v", b, err)
		}
		again, _ := Encode(got)
		if string(again) != string(b) {
			t.Errorf("round trip changed the frame:\n got %s\nwant %s", again, b)
		}
	}
}

func TestDecodeRefusals(t *testing.T) {
	cases := []struct {
		name  string
		in    string
		max   int
		close int
		want  string
	}{
		{"not json", `{"type":`, 0, CloseInvalidPayload, "not a JSON object"},
		{"array", `[1,2]`, 0, CloseInvalidPayload, "not a JSON object"},
		{"no type", `{"id":"x"}`, 0, CloseProtocolError, `no "type"`},
		{"unknown type", `{"type":"launch_missiles"}`, 0, CloseProtocolError, `unknown frame type "launch_missiles"`},
		{"wrong field type", `{"type":"hello","protocol":"one","device_id":"d"}`, 0, CloseInvalidPayload, `"protocol"`},
		{"missing device", `{"type":"hello","protocol":1}`, 0, CloseProtocolError, `missing field "device_id"`},
		{"command no deadline", `{"type":"command","id":"c","project_id":"p","name":"read_room"}`, 0, CloseProtocolError, `missing field "deadline"`},
		{"command args not object", `{"type":"command","id":"c","project_id":"p","name":"n","deadline":"2026-01-01T00:00:00Z","args":[1]}`, 0, CloseInvalidPayload, `"args" must be a JSON object`},
		{"result without error", `{"type":"result","id":"c","ok":false}`, 0, CloseProtocolError, `missing field "error"`},
		{"result bad code", `{"type":"result","id":"c","ok":false,"error":{"code":"oops","message":"m"}}`, 0, CloseProtocolError, `unknown error code "oops"`},
		{"drain out of range", `{"type":"drain","after_ms":-5}`, 0, CloseProtocolError, "out of range"},
		{"too big", `{"type":"cancel","id":"` + strings.Repeat("x", 100) + `"}`, 64, CloseTooBig, "exceeds the 64-byte limit"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode([]byte(tc.in), tc.max)
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("want *ProtocolError, got %v", err)
			}
			if pe.Close != tc.close {
				t.Errorf("close code = %d, want %d (%s)", pe.Close, tc.close, pe.Reason)
			}
			if !strings.Contains(pe.Reason, tc.want) {
				t.Errorf("reason %q does not contain %q", pe.Reason, tc.want)
			}
			if len(pe.Reason) > 123 {
				t.Errorf("reason is %d bytes, over the websocket limit", len(pe.Reason))
			}
		})
	}
}

func TestCheckVersion(t *testing.T) {
	if err := CheckVersion(&Hello{Protocol: ProtocolVersion, DeviceID: "d"}); err != nil {
		t.Fatalf("current version refused: %v", err)
	}
	for _, v := range []int{ProtocolVersion - 1, ProtocolVersion + 1} {
		err := CheckVersion(&Hello{Protocol: v, DeviceID: "d"})
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Close != CloseVersion {
			t.Fatalf("version %d: got %v, want close %d", v, err, CloseVersion)
		}
	}
}

func TestCodesClosedSet(t *testing.T) {
	seen := map[Code]bool{}
	for _, c := range Codes() {
		if !c.Valid() || c.Hint() == "" {
			t.Errorf("code %q lacks info", c)
		}
		seen[c] = true
	}
	if len(seen) != 14 || len(codeInfo) != 14 {
		t.Fatalf("closed set has %d codes listed and %d described, want 14", len(seen), len(codeInfo))
	}
	if Code("made_up").Valid() {
		t.Fatal("an unknown code is valid")
	}
	if e := AsError(errors.New("boom")); e.Code != CodeInternal || !e.Retryable {
		t.Fatalf("plain error mapped to %+v", e)
	}
	wrapped := errors.Join(errors.New("ctx"), Errorf(CodeNotFound, "room r1 not found"))
	if e := AsError(wrapped); e.Code != CodeNotFound {
		t.Fatalf("wrapped error mapped to %+v", e)
	}
}

// TestDecodeInvalidUTF8 is RFC 6455's rule: a text frame that is not UTF-8
// closes with 1007, not 1002.
func TestDecodeInvalidUTF8(t *testing.T) {
	for _, b := range [][]byte{[]byte("{\"type\":\"hel\xfflo\"}"), []byte("{\"type\":\"event\",\"event\":\"x\",\"data\":\"\xc3\x28\"}")} {
		_, err := Decode(b, 0)
		var pe *ProtocolError
		if !errors.As(err, &pe) || pe.Close != CloseInvalidPayload {
			t.Errorf("%q: %v, want close %d", b, err, CloseInvalidPayload)
		}
	}
}

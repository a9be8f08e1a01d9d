package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"
	"unicode/utf8"
)

// DefaultMaxFrame is the largest frame either side accepts unless configured.
const DefaultMaxFrame = 1 << 20

// Websocket close codes used by roomrelay. 1000–1015 are RFC 6455's; 4000–4999
// are application codes whose reason text says what to do.
const (
	CloseNormal          = 1000
	CloseGoingAway       = 1001
	CloseProtocolError   = 1002 // unknown type, missing field, wrong order
	CloseInvalidPayload  = 1007 // not JSON, not an object, wrong field types
	CloseTooBig          = 1009 // frame over the limit
	CloseVersion         = 4001 // hello carries a protocol version the peer does not speak
	CloseRevoked         = 4003 // the device's token was revoked
	CloseReplaced        = 4009 // a newer session of the same device took over
	CloseHeartbeatMissed = 4010 // informational; silent loss is usually seen as a read error
)

// ProtocolError is a frame the peer must refuse; Close is the websocket close
// code to send and Error() the reason (kept under the 123-byte limit).
type ProtocolError struct {
	Close  int
	Reason string
}

func (e *ProtocolError) Error() string { return e.Reason }

func protoErr(close int, format string, args ...any) *ProtocolError {
	r := fmt.Sprintf(format, args...)
	if len(r) > 120 { // RFC 6455: a close reason fits in 123 bytes
		r = r[:120]
	}
	return &ProtocolError{Close: close, Reason: r}
}

// Encode marshals a frame with its "type" field first.
func Encode(f Frame) ([]byte, error) {
	body, err := json.Marshal(f)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", f.FrameType(), err)
	}
	var b bytes.Buffer
	b.Grow(len(body) + 24)
	b.WriteString(`{"type":`)
	t, _ := json.Marshal(f.FrameType())
	b.Write(t)
	if len(body) > 2 { // body is "{...}"; "{}" has no fields to add
		b.WriteByte(',')
		b.Write(body[1:])
	} else {
		b.WriteByte('}')
	}
	return b.Bytes(), nil
}

// Decode parses one frame. max bounds the size (0 means DefaultMaxFrame).
// Every failure is a *ProtocolError naming the close code to use.
func Decode(data []byte, max int) (Frame, error) {
	if max <= 0 {
		max = DefaultMaxFrame
	}
	if len(data) > max {
		return nil, protoErr(CloseTooBig, "frame of %d bytes exceeds the %d-byte limit", len(data), max)
	}
	// RFC 6455 §8.1: a text frame that is not UTF-8 fails the connection
	// with 1007 (encoding/json would silently replace the bytes).
	if !utf8.Valid(data) {
		return nil, protoErr(CloseInvalidPayload, "text frame is not valid UTF-8")
	}
	if typ, ok := leadingType(data); ok {
		if f := newFrame(typ); f != nil {
			return decodeInto(f, typ, data)
		}
	}
	return decodeSlow(data)
}

// leadingType reads the frame's type where the frame begins as Encode
// writes it, {"type":"NAME", so the frames of our own peers skip a first
// decode of the whole frame for its head. Anything else (spaces, escapes,
// "type" later in the object) goes the slow way. A frame that repeats
// "type" is read by its first one here and by its last one there; the peer
// chooses its frame's type either way.
func leadingType(data []byte) (string, bool) {
	const pre = `{"type":"`
	if len(data) <= len(pre) || string(data[:len(pre)]) != pre {
		return "", false
	}
	rest := data[len(pre):]
	i := bytes.IndexByte(rest, '"')
	if i <= 0 || i > 16 || i+1 >= len(rest) || (rest[i+1] != ',' && rest[i+1] != '}') ||
		bytes.IndexByte(rest[:i], '\\') >= 0 {
		return "", false
	}
	return string(rest[:i]), true
}

// decodeSlow finds the type by decoding the frame's head first.
func decodeSlow(data []byte) (Frame, error) {
	var head struct {
		Type *string `json:"type"`
	}
	if err := json.Unmarshal(data, &head); err != nil {
		return nil, protoErr(CloseInvalidPayload, "frame is not a JSON object: %v", err)
	}
	if head.Type == nil {
		return nil, protoErr(CloseProtocolError, "frame has no \"type\" field")
	}
	return decodeAs(*head.Type, data)
}

// newFrame returns an empty frame of type typ, nil for an unknown type.
func newFrame(typ string) Frame {
	switch typ {
	case TypeHello:
		return new(Hello)
	case TypeWelcome:
		return new(Welcome)
	case TypeCommand:
		return new(Command)
	case TypeResult:
		return new(Result)
	case TypeCancel:
		return new(Cancel)
	case TypeEvent:
		return new(Event)
	case TypeDrain:
		return new(Drain)
	}
	return nil
}

// decodeAs decodes data as a frame of type typ and checks its fields.
func decodeAs(typ string, data []byte) (Frame, error) {
	f := newFrame(typ)
	if f == nil {
		return nil, protoErr(CloseProtocolError, "unknown frame type %q", Clip(typ, 32))
	}
	return decodeInto(f, typ, data)
}

// decodeInto decodes data into f, an empty frame of type typ, and checks
// its fields.
func decodeInto(f Frame, typ string, data []byte) (Frame, error) {
	// The "type" field is known to the envelope, not to the body structs, so
	// unknown fields are tolerated (newer minor revisions may add some).
	if err := json.Unmarshal(data, f); err != nil {
		var ute *json.UnmarshalTypeError
		var se *json.SyntaxError
		switch {
		case errors.As(err, &ute):
			return nil, protoErr(CloseInvalidPayload, "%s frame: field %q has the wrong type", typ, ute.Field)
		case errors.As(err, &se):
			// What the slow way's head decode says of the same bytes.
			return nil, protoErr(CloseInvalidPayload, "frame is not a JSON object: %v", err)
		}
		return nil, protoErr(CloseInvalidPayload, "%s frame: %v", typ, err)
	}
	if err := validate(f); err != nil {
		return nil, err
	}
	return f, nil
}

// validate checks the fields each frame type requires.
func validate(f Frame) error {
	missing := func(field string) error {
		return protoErr(CloseProtocolError, "%s frame: missing field %q", f.FrameType(), field)
	}
	switch v := f.(type) {
	case *Hello:
		if v.Protocol == 0 {
			return missing("protocol")
		}
		if v.DeviceID == "" {
			return missing("device_id")
		}
	case *Welcome:
		if v.SessionID == "" {
			return missing("session_id")
		}
		if v.HeartbeatMS <= 0 {
			return missing("heartbeat_ms")
		}
	case *Command:
		switch {
		case v.ID == "":
			return missing("id")
		case v.Name == "":
			return missing("name")
		case v.ProjectID == "":
			return missing("project_id")
		case v.Deadline.IsZero():
			return missing("deadline")
		}
		if len(v.Args) > 0 && !isJSONObject(v.Args) {
			return protoErr(CloseInvalidPayload, "command frame: \"args\" must be a JSON object")
		}
	case *Result:
		if v.ID == "" {
			return missing("id")
		}
		if !v.OK && v.Error == nil {
			return missing("error")
		}
		if v.Error != nil && !v.Error.Code.Valid() {
			return protoErr(CloseProtocolError, "result frame: unknown error code %q", Clip(string(v.Error.Code), 32))
		}
	case *Cancel:
		if v.ID == "" {
			return missing("id")
		}
	case *Event:
		if v.Event == "" {
			return missing("event")
		}
	case *Drain:
		if v.AfterMS < 0 || v.AfterMS > int64(time.Hour/time.Millisecond) {
			return protoErr(CloseProtocolError, "drain frame: after_ms %d out of range 0..3600000", v.AfterMS)
		}
	}
	return nil
}

// CheckVersion is what the hub applies to a hello: a different protocol
// version is refused with CloseVersion and a reason that says both versions.
func CheckVersion(h *Hello) error {
	if h.Protocol != ProtocolVersion {
		return protoErr(CloseVersion, "agent speaks protocol %d, hub speaks %d: upgrade the older side", h.Protocol, ProtocolVersion)
	}
	return nil
}

func isJSONObject(raw json.RawMessage) bool {
	t := bytes.TrimLeft(raw, " \t\r\n")
	return len(t) > 0 && t[0] == '{'
}

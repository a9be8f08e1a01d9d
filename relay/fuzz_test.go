package relay

import (
	"bytes"
	"errors"
	"testing"
	"unicode/utf8"
)

// FuzzDecode checks that no input makes the decoder panic, that every refusal
// is a *ProtocolError with a close code a peer may send, and that whatever it
// accepts encodes and decodes again to the same bytes.
func FuzzDecode(f *testing.F) {
	f.Add([]byte(`{"type":"hello","protocol":1,"device_id":"d","policy":[{"project":"p","commands":["read_room"]}]}`))
	f.Add([]byte(`{"type":"command","id":"c","project_id":"p","name":"read_room","args":{"room_id":"r"},"deadline":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"type":"result","id":"c","ok":false,"error":{"code":"expired","message":"m"}}`))
	f.Add([]byte(`{"type":"drain","after_ms":10}`))
	f.Add([]byte(`{"type":}`))
	f.Add([]byte(`{"type":"result","id":"c","ok":true,"result":{"a":[1,{"b":"x"}]},"audit_head":{"seq":3,"hash":"h"}} x`))
	f.Add([]byte(`{"type":"result","id":"c","ok":"yes"}`))
	f.Add([]byte(`{"type":"event","event":"e","data":{"k":1}}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := Decode(data, 4096)
		sameAsSlow(t, data, fr, err)
		if err != nil {
			var pe *ProtocolError
			if !errors.As(err, &pe) {
				t.Fatalf("refusal is not a *ProtocolError: %v", err)
			}
			switch pe.Close {
			case CloseProtocolError, CloseInvalidPayload, CloseTooBig:
			default:
				t.Fatalf("unexpected close code %d", pe.Close)
			}
			if len(pe.Reason) > 123 {
				t.Fatalf("reason of %d bytes", len(pe.Reason))
			}
			return
		}
		b, err := Encode(fr)
		if err != nil {
			t.Fatalf("accepted frame does not encode: %v", err)
		}
		fr2, err := Decode(b, 1<<20)
		if err != nil {
			t.Fatalf("re-encoded frame refused: %v\n%s", err, b)
		}
		b2, _ := Encode(fr2)
		if string(b) != string(b2) {
			t.Fatalf("not stable:\n%s\n%s", b, b2)
		}
	})
}

// sameAsSlow: where leadingType reads the type without decoding the head,
// the frame (or the refusal) is what decoding the head first gives. Frames
// that repeat "type" (in any case, or escaped) are left out: there the two
// ways read different keys, as leadingType says.
func sameAsSlow(t *testing.T, data []byte, fr Frame, err error) {
	t.Helper()
	if _, ok := leadingType(data); !ok || len(data) > 4096 || bytes.Count(bytes.ToLower(data), []byte(`"type"`)) != 1 ||
		bytes.IndexByte(data, '\\') >= 0 || !utf8Valid(data) {
		return
	}
	slow, serr := decodeSlow(data)
	if (err == nil) != (serr == nil) {
		t.Fatalf("fast %v, slow %v", err, serr)
	}
	if err != nil {
		if err.Error() != serr.Error() || err.(*ProtocolError).Close != serr.(*ProtocolError).Close {
			t.Fatalf("fast refused with %v, slow with %v", err, serr)
		}
		return
	}
	a, _ := Encode(fr)
	b, _ := Encode(slow)
	if !bytes.Equal(a, b) {
		t.Fatalf("fast %s, slow %s", a, b)
	}
}

func utf8Valid(b []byte) bool { return utf8.Valid(b) }

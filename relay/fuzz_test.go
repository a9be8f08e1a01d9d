package relay

import (
	"errors"
	"testing"
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
	f.Fuzz(func(t *testing.T, data []byte) {
		fr, err := Decode(data, 4096)
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

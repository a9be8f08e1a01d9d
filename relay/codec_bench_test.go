package relay

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// BenchmarkDecode: a read_room-sized result frame as an agent sends it,
// decoded the way every frame is (Decode: the type read from the frame's
// start) beside decoding its head first (the way for frames Encode did not
// write).
//
//	go test -run '^$' -bench Decode ./relay
func BenchmarkDecode(b *testing.B) {
	res := benchFrame()
	b.Logf("frame of %d bytes", len(res))
	b.Run("leading-type", func(b *testing.B) {
		b.SetBytes(int64(len(res)))
		for b.Loop() {
			if _, err := Decode(res, 0); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("head-first", func(b *testing.B) {
		b.SetBytes(int64(len(res)))
		for b.Loop() {
			if _, err := decodeSlow(res); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// benchFrame is a read_room-sized result frame.
func benchFrame() []byte {
	apps := make([]string, 8)
	for i := range apps {
		apps[i] = fmt.Sprintf(`{"id":"app-%d","name":"App %d","kind":"snippet","state":"installed"}`, i, i)
	}
	res, _ := Encode(&Result{ID: "cmd-0123456789", OK: true,
		Result:    json.RawMessage(`{"room":{"id":"r1","name":"Room","project_id":"p1"},"apps":[` + strings.Join(apps, ",") + `],"pending":2}`),
		AuditHead: &AuditHead{Seq: 1234, Hash: strings.Repeat("ab", 32)}})
	return res
}

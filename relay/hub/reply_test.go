package hub

import (
	"bytes"
	"encoding/json"
	"reflect"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

// TestEncodeReplyIsMarshal: the reply a result frame becomes decodes to
// what json.Marshal's would, byte for byte where the device sent a compact
// payload without HTML characters (what our agent sends).
func TestEncodeReplyIsMarshal(t *testing.T) {
	t.Parallel()
	frames := []string{
		`{"type":"result","id":"c1","ok":true,"result":{"room":{"id":"r1","name":"Room"},"apps":[1,2,{"a":null}]}}`,
		`{"type":"result","id":"c2","ok":true}`,
		`{"type":"result","id":"c3","ok":true,"result":{ "spaced" : [ 1 , 2 ] , "html":"<b>&</b>" }}`,
		`{"type":"result","id":"c<4>","ok":true,"result":{}}`,
		`{"type":"result","id":"c\u00e95","ok":true,"result":"x"}`,
		`{"type":"result","id":"c6","ok":false,"error":{"code":"not_found","message":"no room"}}`,
		`{"type":"result","id":"c7","ok":true,"result":null,"audit_head":{"seq":3,"hash":"` + string(bytes.Repeat([]byte("ab"), 32)) + `"}}`,
	}
	// Replies decodeReply must not take apart: more after the payload, a
	// payload that is not JSON.
	for _, bad := range []string{
		`{"id":"c","ok":true,"result":{"a":1},"audit_head":{"seq":1,"hash":"h"}}`,
		`{"id":"c","ok":true,"result":{"a":1},"error":{"code":"internal","message":"m"}}`,
	} {
		back, err := decodeReply([]byte(bad))
		var w relay.Result
		json.Unmarshal([]byte(bad), &w)
		if err != nil || back.AuditHead == nil && w.AuditHead != nil || back.Error == nil && w.Error != nil {
			t.Fatalf("decodeReply(%s) = %+v, %v; want %+v", bad, back, err, w)
		}
	}
	if _, err := decodeReply([]byte(`{"id":"c","ok":true,"result":{"a":}`)); err == nil {
		t.Fatal("decodeReply took a reply whose payload is not JSON")
	}
	for _, fr := range frames {
		f, err := relay.Decode([]byte(fr), 0)
		if err != nil {
			t.Fatalf("%s: %v", fr, err)
		}
		res := f.(*relay.Result)
		got, want := encodeReply(res), mustJSON(res)
		var g, w relay.Result
		if err := json.Unmarshal(got, &g); err != nil {
			t.Fatalf("%s: reply %s does not decode: %v", fr, got, err)
		}
		if err := json.Unmarshal(want, &w); err != nil {
			t.Fatal(err)
		}
		gv, wv := jsonValue(t, g.Result), jsonValue(t, w.Result)
		g.Result, w.Result = nil, nil
		if !reflect.DeepEqual(g, w) || !reflect.DeepEqual(gv, wv) {
			t.Fatalf("%s:\nreply    %s\nMarshal  %s", fr, got, want)
		}
		if !bytes.Contains([]byte(fr), []byte(" ")) && !bytes.ContainsAny([]byte(fr), "<>&") && !bytes.Equal(got, want) {
			t.Fatalf("%s: reply %s, Marshal %s", fr, got, want)
		}
		// The requester reads both encodings back to the same result.
		for _, enc := range [][]byte{got, want} {
			back, err := decodeReply(enc)
			if err != nil {
				t.Fatalf("%s: decodeReply(%s): %v", fr, enc, err)
			}
			bv := jsonValue(t, back.Result)
			back.Result = nil
			if !reflect.DeepEqual(*back, w) || !reflect.DeepEqual(bv, wv) {
				t.Fatalf("%s: decodeReply(%s) = %+v %v, want %+v %v", fr, enc, *back, bv, w, wv)
			}
		}
	}
}

// jsonValue is what a JSON payload decodes to (nil for none).
func jsonValue(t *testing.T, raw json.RawMessage) any {
	if len(raw) == 0 {
		return nil
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		t.Fatal(err)
	}
	return v
}

// BenchmarkEncodeReply: a read_room-sized result as the NATS reply,
// encodeReply beside json.Marshal.
//
//	go test -run '^$' -bench EncodeReply ./relay/hub
func BenchmarkEncodeReply(b *testing.B) {
	apps := bytes.Repeat([]byte(`{"id":"app-1","name":"App 1","kind":"snippet","state":"installed"},`), 8)
	fr := `{"type":"result","id":"cmd-0123456789","ok":true,"result":{"room":{"id":"r1","name":"Room","project_id":"p1"},"apps":[` +
		string(apps[:len(apps)-1]) + `],"pending":2}}`
	f, err := relay.Decode([]byte(fr), 0)
	if err != nil {
		b.Fatal(err)
	}
	res := f.(*relay.Result)
	b.Run("encodeReply", func(b *testing.B) {
		for b.Loop() {
			encodeReply(res)
		}
	})
	b.Run("Marshal", func(b *testing.B) {
		for b.Loop() {
			mustJSON(res)
		}
	})
}

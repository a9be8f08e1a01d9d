package hub

import (
	"bytes"
	"encoding/json"

	"github.com/roomrelay/roomrelay/relay"
)

// A command's result travels from the node holding the device's socket to
// the requester as a NATS reply: encodeReply writes it, decodeReply reads
// it. An ok result is written and read without passing its payload
// through encoding/json again, in the layout json.Marshal gives a
// relay.Result, so either side may be an older node that marshals.

// The pieces of an ok reply, in json.Marshal's order: {"id":"ID","ok":true,"result":...}.
const (
	replyID     = `{"id":"`
	replyOK     = `","ok":true`
	replyResult = `,"result":`
)

// encodeReply is the NATS reply for res: what json.Marshal writes, except
// that an ok result's payload is copied as it came. The device's frame was
// decoded by relay.Decode, so the payload is valid JSON already, and
// Marshal's second pass over it (compacting and checking it again) was the
// hub's largest per-byte cost per result after the decode. Anything else
// (errors, ids needing escapes) is marshalled.
func encodeReply(res *relay.Result) []byte {
	if !res.OK || res.Error != nil || res.AuditHead != nil || !plainJSONString(res.ID) {
		return mustJSON(res)
	}
	b := make([]byte, 0, len(res.ID)+len(res.Result)+32)
	b = append(b, replyID...)
	b = append(b, res.ID...)
	b = append(b, replyOK...)
	if len(res.Result) > 0 {
		b = append(b, replyResult...)
		b = append(b, res.Result...)
	}
	return append(b, '}')
}

// plainJSONString reports whether s is written into a JSON string as it
// is by json.Marshal: printable ASCII without quote, backslash or the HTML
// characters Marshal escapes.
func plainJSONString(s string) bool {
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c < 0x20 || c >= 0x7f, c == '"', c == '\\', c == '<', c == '>', c == '&':
			return false
		}
	}
	return true
}

// decodeReply reads a command's NATS reply. A reply as encodeReply (or
// json.Marshal) writes an ok result, {"id":"ID","ok":true,"result":...},
// is taken apart without decoding its payload: the payload is only checked
// to be valid JSON. Anything else is unmarshalled.
func decodeReply(data []byte) (*relay.Result, error) {
	const pre, mid = replyID, replyOK + replyResult
	if bytes.HasPrefix(data, []byte(pre)) && len(data) > len(pre)+len(mid)+1 && data[len(data)-1] == '}' {
		rest := data[len(pre):]
		if i := bytes.IndexByte(rest, '"'); i >= 0 && bytes.IndexByte(rest[:i], '\\') < 0 && bytes.HasPrefix(rest[i:], []byte(mid)) {
			payload := rest[i+len(mid) : len(rest)-1]
			if json.Valid(payload) {
				return &relay.Result{ID: string(rest[:i]), OK: true, Result: json.RawMessage(payload)}, nil
			}
		}
	}
	var res relay.Result
	if err := json.Unmarshal(data, &res); err != nil {
		return nil, err
	}
	return &res, nil
}

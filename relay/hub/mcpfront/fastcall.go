package mcpfront

import (
	"bytes"
	"encoding/json"
	"errors"
	"mime"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The front answers a POST that carries one plain tools/call of a tool
// that needs no session (every tool but wait_for_review, which sends
// progress) itself, and hands everything else to the go-sdk's stateless
// handler as before. For such a call the SDK would set up a session per
// POST (a jsonrpc2 connection, its goroutines, the synthesized initialize
// state) and decode the same body five times over (readBatch, the message,
// its _meta, its name, its params): measured in bench/roundtrip, the SDK's
// part of a read_room cost more CPU than the whole HTTP API path, hub and
// agent together.
//
// The fast path runs the same tool handler with the same request fields
// the SDK would fill (the params, the token info, the header), behind the
// same authentication and guard, and answers with the JSON-RPC response an
// SDK in JSON-response mode writes (application/json, which every
// streamable HTTP client must accept). It takes only what it fully
// understands; anything else (another protocol version, a batch, unknown
// members, a malformed id) goes to the SDK, whose answer, error or not, is
// unchanged.

// fastVersions are the protocol versions the fast path serves: every one
// the SDK serves over streamable HTTP. "" is a request without the header,
// which the SDK reads as 2025-03-26.
var fastVersions = func() []string {
	var vs []string
	for _, v := range mcp.SupportedProtocolVersions() {
		if v >= "2025-03-26" {
			vs = append(vs, v)
		}
	}
	return append(vs, "")
}()

// newProtocol is the first protocol version whose calls carry their
// protocol version, client capabilities and info in _meta and name their
// method and tool in headers (SEP-2575), which the SDK checks.
const newProtocol = "2026-07-28"

// fastMsg is a tools/call message as the fast path takes it: these
// members and no others.
type fastMsg struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id"`
	Method  string          `json:"method"`
	Params  *struct {
		Name      string          `json:"name"`
		Arguments json.RawMessage `json:"arguments,omitempty"`
		Meta      json.RawMessage `json:"_meta,omitempty"` // a progress token: these tools send no progress
	} `json:"params"`
}

// fastCall serves r if it is a call the fast path takes, and reports
// whether it did; when it reports false it wrote nothing.
func (f *Front) fastCall(w http.ResponseWriter, r *http.Request, body []byte) bool {
	version := r.Header.Get("Mcp-Protocol-Version")
	if !slices.Contains(fastVersions, version) {
		return false
	}
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		return false
	}
	if !acceptsJSONAndSSE(r.Header.Values("Accept")) {
		return false
	}
	ti := auth.TokenInfoFromContext(r.Context())
	if ti == nil {
		return false
	}
	var msg fastMsg
	// Unknown members are refused by membersExact below (with any
	// trailing data by Unmarshal).
	if json.Unmarshal(body, &msg) != nil {
		return false
	}
	if msg.JSONRPC != "2.0" || msg.Method != "tools/call" || msg.Params == nil {
		return false
	}
	// encoding/json matches a member to a field in any case ("Method"),
	// the SDK only as spelled: what it would not read, it answers itself.
	if !membersExact(body, fastMembers, func(name string, v []byte) bool {
		return name != "params" || membersExact(v, fastParamsMembers, nil)
	}) {
		return false
	}
	h, ok := f.fast[msg.Params.Name]
	if !ok {
		return false
	}
	id, ok := plainID(msg.ID)
	if !ok || !fastMeta(version, msg.Params.Meta) {
		return false
	}
	if version >= newProtocol && (r.Header.Get("Mcp-Method") != msg.Method || r.Header.Get("Mcp-Name") != msg.Params.Name) {
		return false
	}
	req := &mcp.CallToolRequest{
		Params: &mcp.CallToolParamsRaw{Name: msg.Params.Name, Arguments: msg.Params.Arguments},
		Extra:  &mcp.RequestExtra{TokenInfo: ti, Header: r.Header},
	}
	f.fastCalls.Add(1)
	res, err := h(r.Context(), req)
	var out []byte
	if err != nil { // the front's handlers answer tool errors as results; this is a defect
		f.log.Error("tools/call handler failed", "tool", msg.Params.Name, "err", err)
		out = rpcErrorBody(id, -32603, err.Error())
	} else {
		if res.Content == nil {
			res.Content = []mcp.Content{} // as the SDK: never "content": null
		}
		if version >= newProtocol { // as the SDK: the server names itself in every result
			m := res.GetMeta()
			if m == nil {
				m = map[string]any{}
			}
			if _, ok := m[mcp.MetaKeyServerInfo]; !ok {
				m[mcp.MetaKeyServerInfo] = f.impl
			}
			res.SetMeta(m)
		}
		// The envelope around the result's own encoding: what encoding
		// {jsonrpc, id, result} writes, without compacting the result's
		// bytes a second time (json.Marshal does that to a Marshaler's).
		var rb []byte
		if rb, err = res.MarshalJSON(); err == nil && (len(rb) < 2 || rb[0] != '{') {
			err = errors.New("not a JSON object")
		}
		if err == nil {
			out = make([]byte, 0, len(rb)+len(id)+64)
			out = append(out, `{"jsonrpc":"2.0","id":`...)
			out = append(out, id...)
			out = append(out, `,"result":{`...)
			if version >= newProtocol {
				// What the SDK adds for a client of this protocol (a final
				// result, not a request for input), through a field of its own.
				out = append(out, `"resultType":"complete"`...)
				if len(rb) > 2 {
					out = append(out, ',')
				}
			}
			out = append(out, rb[1:]...)
			out = append(out, '}')
		}
		if err != nil {
			f.log.Error("tools/call result does not encode", "tool", msg.Params.Name, "err", err)
			out = rpcErrorBody(id, -32603, "the result does not encode")
		}
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-cache, no-transform")
	_, _ = w.Write(append(out, '\n'))
	return true
}

// fastMeta reports whether a call's _meta is one the fast path takes for
// the request's protocol version: before newProtocol, one that does not
// claim a protocol version (the SDK checks such a claim against the
// header); from it, one with the header's protocol version, client
// capabilities (an object) and, if present, client info (an
// implementation), which the SDK requires.
func fastMeta(version string, raw json.RawMessage) bool {
	var pv, caps, ci []byte
	if t := bytes.TrimSpace(raw); len(t) > 0 && string(t) != "null" {
		if !eachMember(t, func(key, v []byte) bool {
			switch string(key) { // the last of a repeated name, as a decoded map keeps it
			case mcp.MetaKeyProtocolVersion:
				pv = v
			case mcp.MetaKeyClientCapabilities:
				caps = v
			case mcp.MetaKeyClientInfo:
				ci = v
			}
			return bytes.IndexByte(key, '\\') < 0 // an escaped name is the SDK's to read
		}) {
			return false
		}
	}
	if version < newProtocol {
		return pv == nil
	}
	var v string
	if pv == nil || json.Unmarshal(pv, &v) != nil || v != version {
		return false
	}
	// An object (the message was decoded whole, so it is valid JSON).
	if len(caps) == 0 || caps[0] != '{' {
		return false
	}
	if ci != nil {
		var impl *mcp.Implementation
		if json.Unmarshal(ci, &impl) != nil || impl == nil {
			return false
		}
	}
	return true
}

// plainID returns a JSON-RPC id in the form the SDK writes it back: a
// string, or an integer; ok is false for anything else (null, a fraction,
// an object), which the SDK then answers.
func plainID(raw json.RawMessage) (json.RawMessage, bool) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 {
		return nil, false
	}
	if raw[0] == '"' {
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return nil, false
		}
		b, _ := json.Marshal(s)
		return b, true
	}
	n, err := strconv.ParseInt(string(raw), 10, 64)
	if err != nil {
		return nil, false
	}
	return strconv.AppendInt(nil, n, 10), true
}

// acceptsJSONAndSSE is the SDK's Accept rule for a POST: both
// application/json and text/event-stream (or wildcards covering them).
func acceptsJSONAndSSE(values []string) bool {
	var jsonOK, sseOK bool
	for _, v := range values {
		for _, raw := range strings.Split(v, ",") {
			base, _, _ := strings.Cut(strings.TrimSpace(raw), ";")
			switch strings.ToLower(strings.TrimSpace(base)) {
			case "application/json", "application/*":
				jsonOK = true
			case "text/event-stream", "text/*":
				sseOK = true
			case "*/*":
				jsonOK, sseOK = true, true
			}
		}
	}
	return jsonOK && sseOK
}

// The member names of a fastMsg and of its params, as spelled.
var (
	fastMembers       = []string{"jsonrpc", "id", "method", "params"}
	fastParamsMembers = []string{"name", "arguments", "_meta"}
)

// membersExact reports whether every member name of the JSON object obj
// (valid JSON: decoded before) is spelled exactly as one of names, without
// escapes, and inner, when set, accepts each member's value.
func membersExact(obj []byte, names []string, inner func(name string, value []byte) bool) bool {
	return eachMember(obj, func(key, value []byte) bool {
		for _, name := range names {
			if string(key) == name { // unknown, another case or escaped: no name matches
				return inner == nil || inner(name, value)
			}
		}
		return false
	})
}

// eachMember calls fn with each member of the JSON object obj (valid
// JSON: decoded before), its name as written between the quotes and its
// value, in order, until fn returns false; it reports whether obj is an
// object and fn accepted every member.
func eachMember(obj []byte, fn func(key, value []byte) bool) bool {
	i := skipSpace(obj, 0)
	if i >= len(obj) || obj[i] != '{' {
		return false
	}
	for i = skipSpace(obj, i+1); i < len(obj) && obj[i] != '}'; {
		if obj[i] != '"' {
			return false
		}
		end := skipValue(obj, i) // the name, escapes and all
		if end < 0 {
			return false
		}
		key := obj[i+1 : end-1]
		if i = skipSpace(obj, end); i >= len(obj) || obj[i] != ':' {
			return false
		}
		start := skipSpace(obj, i+1)
		end = skipValue(obj, start)
		if end < 0 || !fn(key, obj[start:end]) {
			return false
		}
		if i = skipSpace(obj, end); i < len(obj) && obj[i] == ',' {
			i = skipSpace(obj, i+1)
		}
	}
	return i < len(obj)
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// skipValue returns the index just past the valid JSON value at b[i:], or
// -1 when it runs out.
func skipValue(b []byte, i int) int {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			for i++; i < len(b) && b[i] != '"'; i++ {
				if b[i] == '\\' {
					i++
				}
			}
			if i >= len(b) {
				return -1
			}
			if depth == 0 {
				return i + 1
			}
		case '{', '[':
			depth++
		case '}', ']':
			if depth--; depth == 0 {
				return i + 1
			}
			if depth < 0 {
				return i // the end of the enclosing object
			}
		case ',', ' ', '\t', '\n', '\r':
			if depth == 0 {
				return i // after a number or a literal
			}
		}
	}
	if depth == 0 {
		return i
	}
	return -1
}

package mcpfront

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay"
)

// Every tool result leaves through visibleResult: room names, device
// messages and every other string a device reported are shown through
// relay.PrintableLine, in the text and in structuredContent (keys too), so
// control characters (terminal escapes, CR/LF that forge a line for the
// model), bidi controls and invisible format characters reach neither the
// model nor a user's terminal; they read as ⟨U+XXXX⟩ markers.

// visibleResult makes r's text and structuredContent printable.
func visibleResult(r *mcp.CallToolResult) *mcp.CallToolResult {
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			tc.Text = relay.PrintableLine(tc.Text)
		}
	}
	if r.StructuredContent != nil {
		r.StructuredContent = visibleValue(r.StructuredContent)
	}
	return r
}

// visibleValue returns v as JSON values (maps, slices, strings, numbers)
// with every string and key made printable. A value that does not encode
// is dropped: a tool result must never carry what could not be checked.
func visibleValue(v any) any {
	// A value decoded from JSON (a device's result) is walked as it is:
	// the same answer as the round trip below, which the front paid for on
	// every call.
	if out, ok := visiblePlain(v); ok {
		return out
	}
	return visibleRoundTrip(v)
}

// visibleRoundTrip is visibleValue of any value: encoded, decoded as JSON
// values, walked.
func visibleRoundTrip(v any) any {
	b, err := json.Marshal(v)
	if err != nil {
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // ids and counts keep their exact digits
	var out any
	if err := dec.Decode(&out); err != nil {
		return nil
	}
	return visibleWalk(out)
}

func visibleWalk(v any) any {
	switch x := v.(type) {
	case string:
		return relay.PrintableLine(x)
	case []any:
		for i := range x {
			x[i] = visibleWalk(x[i])
		}
		return x
	case map[string]any:
		m := make(map[string]any, len(x))
		for k, e := range x {
			m[relay.PrintableLine(k)] = visibleWalk(e)
		}
		return m
	}
	return v
}

// visiblePlain is visibleValue of a value made only of what json.Unmarshal
// makes into an any (maps, slices, strings, float64s, bools, nil) or
// json.Numbers, without encoding it: numbers become the json.Number of
// their encoding, as the round trip gives them. ok is false for any other
// type, which visibleValue then encodes.
func visiblePlain(v any) (any, bool) {
	switch x := v.(type) {
	case nil, bool, json.Number:
		return x, true
	case string:
		return relay.PrintableLine(x), true
	case float64:
		b, err := json.Marshal(x)
		if err != nil {
			return nil, false
		}
		return json.Number(b), true
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			var ok bool
			if out[i], ok = visiblePlain(e); !ok {
				return nil, false
			}
		}
		return out, true
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			w, ok := visiblePlain(e)
			if !ok {
				return nil, false
			}
			out[relay.PrintableLine(k)] = w
		}
		return out, true
	}
	return nil, false
}

// printableJSON returns raw, a JSON document, as it is when visibleValue
// would change none of its strings or keys: it has no escapes (so every
// string's text is its bytes), no tab or line break anywhere, and no rune
// PrintableLine marks. ok is false otherwise, and the caller walks it.
func printableJSON(raw []byte) (json.RawMessage, bool) {
	if bytes.ContainsAny(raw, "\\\t\n\r") || relay.PrintableLine(string(raw)) != string(raw) {
		return nil, false
	}
	return json.RawMessage(raw), true
}

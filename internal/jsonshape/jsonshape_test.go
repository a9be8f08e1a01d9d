package jsonshape

import (
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"
)

type inner struct {
	A string `json:"a"`
	B int    `json:"b,omitempty"`
}

type base struct {
	ID string `json:"id"`
}

type outer struct {
	base
	When  time.Time         `json:"when"`
	In    inner             `json:"in"`
	List  []inner           `json:"list,omitempty"`
	Map   map[string]inner  `json:"map,omitzero"`
	Ref   *inner            `json:"ref,omitempty"`
	Raw   json.RawMessage   `json:"raw,omitempty"`
	Skip  string            `json:"-"`
	Extra map[string]string `json:"extra,omitempty"`
}

const defs = `{
 "inner": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
 "base": {"type": "object", "properties": {"id": {"type": "string"}}, "required": ["id"]}
}`

const good = `{"allOf": [{"$ref": "#/base"}], "type": "object", "properties": {
 "when": {"type": "string", "format": "date-time"},
 "in": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}, "required": ["a"]},
 "list": {"type": "array", "items": {"$ref": "#/inner"}},
 "map": {"type": "object", "additionalProperties": {"$ref": "#/inner"}},
 "ref": {"$ref": "#/inner"},
 "raw": {},
 "extra": {"type": "object", "additionalProperties": {"type": "string"}}
}, "required": ["when", "in"]}`

func check(t *testing.T, schema string, mode Mode, present map[string]bool) []string {
	t.Helper()
	var d map[string]map[string]any
	if err := json.Unmarshal([]byte(defs), &d); err != nil {
		t.Fatal(err)
	}
	var s map[string]any
	if err := json.Unmarshal([]byte(schema), &s); err != nil {
		t.Fatal(err)
	}
	c := Checker{Present: present, Resolve: func(ref string) (map[string]any, bool) {
		r, ok := d[strings.TrimPrefix(ref, "#/")]
		return r, ok
	}}
	c.Compare("outer", reflect.TypeFor[outer](), s, mode)
	return c.Drift()
}

// TestCompare: the matching schema passes in both modes, and each kind of
// drift, at the top and nested (inline, through items, map values and
// references), is named with its path.
func TestCompare(t *testing.T) {
	t.Parallel()
	if d := check(t, good, Sent, nil); len(d) > 0 {
		t.Fatalf("a matching schema: %v", d)
	}
	if d := check(t, good, Read, nil); len(d) > 0 {
		t.Fatalf("a matching schema, read: %v", d)
	}
	for _, tc := range []struct {
		name, from, to string
		mode           Mode
		want           string
	}{
		{"missing nested", `"b": {"type": "integer"}}, "required": ["a"]},
 "list"`, `"c": {"type": "integer"}}, "required": ["a"]},
 "list"`, Sent, "outer.in (jsonshape.inner): the schema lacks [b]"},
		{"extra through items", `"list": {"type": "array", "items": {"$ref": "#/inner"}}`,
			`"list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}, "b": {"type": "integer"}, "z": {"type": "string"}}, "required": ["a"]}}`,
			Sent, "outer.list[] (jsonshape.inner): the schema has [z], the Go type does not"},
		{"required but omitted", `"required": ["when", "in"]}`, `"required": ["when", "in", "ref"]}`, Sent,
			"outer (jsonshape.outer): the schema requires [ref], which the Go type omits when empty"},
		{"always sent, not required", `"required": ["when", "in"]}`, `"required": ["when"]}`, Sent,
			"outer (jsonshape.outer): the Go type always sends [in]; the schema should list it as required"},
		{"wrong JSON type in a map value", `"additionalProperties": {"type": "string"}`, `"additionalProperties": {"type": "integer"}`, Sent,
			"outer.extra[*]: the schema says integer, the Go type is string"},
		{"a reference to nothing", `"ref": {"$ref": "#/inner"}`, `"ref": {"$ref": "#/nothing"}`, Sent,
			"outer.ref: $ref #/nothing names nothing"},
	} {
		if !strings.Contains(good, tc.from) {
			t.Fatalf("%s: the edit does not apply", tc.name)
		}
		d := check(t, strings.Replace(good, tc.from, tc.to, 1), tc.mode, nil)
		if !slices.Contains(d, tc.want) {
			t.Errorf("%s: drift %q, want %q", tc.name, d, tc.want)
		}
	}
	// Read: "always sent, not required" is the other side's business.
	if d := check(t, strings.Replace(good, `"required": ["when", "in"]}`, `"required": ["when"]}`, 1), Read, nil); len(d) > 0 {
		t.Errorf("read, in not required: %v", d)
	}
	// Present: a property the sender always fills may be required.
	if d := check(t, strings.Replace(good, `"required": ["when", "in"]}`, `"required": ["when", "in", "ref"]}`, 1), Sent, map[string]bool{"ref": true}); len(d) > 0 {
		t.Errorf("present ref required: %v", d)
	}
}

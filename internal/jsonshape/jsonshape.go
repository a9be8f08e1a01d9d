// Package jsonshape compares a Go type's JSON encoding with a JSON Schema
// written for it, nested objects included: the contract tests of the local
// API (openapi.json against the handlers' Go types) and of the provider
// channel (docs/provider-protocol.schema.json against what roomrelay sends
// and reads) use it so that neither document can drift from the Go types
// that are the contracts' source. Only tests import it.
package jsonshape

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"strings"
	"time"
)

// Mode says which way the Go type travels.
type Mode int

const (
	// Sent: Go encodes the type. A property the Go type always writes (no
	// omitempty or omitzero) is required by the schema and the reverse.
	Sent Mode = iota
	// Read: Go decodes the type (a request body, an answer). The schema's
	// required is what the other side must send, so only "the schema
	// requires what Go would omit" is checked, never the reverse.
	Read
)

// Checker compares types with the schemas of one document.
type Checker struct {
	// Resolve returns the schema a "$ref" names.
	Resolve func(ref string) (map[string]any, bool)
	// Present names properties the Go type omits when empty that the
	// schema may still require, because the sender always fills them (and
	// another test checks real messages carry them).
	Present map[string]bool
	seen    map[string]bool
	drift   []string
}

// Compare checks typ against schema s, recursing into properties, array
// items, map values, allOf parts and references; what it finds is added
// to Drift, each line prefixed with path.
func (c *Checker) Compare(path string, typ reflect.Type, s map[string]any, mode Mode) {
	if c.seen == nil {
		c.seen = map[string]bool{}
	}
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	if ref, ok := s["$ref"].(string); ok {
		key := fmt.Sprintf("%v %s %d", typ, ref, mode)
		if c.seen[key] { // checked already (and cycles end here)
			return
		}
		c.seen[key] = true
		r, ok := c.Resolve(ref)
		if !ok {
			c.errorf("%s: $ref %s names nothing", path, ref)
			return
		}
		c.Compare(path, typ, r, mode)
		return
	}
	if t, ok := s["type"].(string); ok && !kindFits(typ, t) {
		c.errorf("%s: the schema says %s, the Go type is %v", path, t, typ)
		return
	}
	switch {
	case typ == reflect.TypeFor[time.Time](), typ == reflect.TypeFor[json.RawMessage]():
	case typ.Kind() == reflect.Struct:
		c.object(path, typ, s, mode)
	case typ.Kind() == reflect.Map:
		if ap, ok := s["additionalProperties"].(map[string]any); ok {
			c.Compare(path+"[*]", typ.Elem(), ap, mode)
		}
	case typ.Kind() == reflect.Slice || typ.Kind() == reflect.Array:
		if it, ok := s["items"].(map[string]any); ok {
			c.Compare(path+"[]", typ.Elem(), it, mode)
		}
	}
}

// Drift is every disagreement found so far, sorted.
func (c *Checker) Drift() []string {
	out := slices.Clone(c.drift)
	sort.Strings(out)
	return slices.Compact(out)
}

func (c *Checker) errorf(format string, args ...any) {
	c.drift = append(c.drift, fmt.Sprintf(format, args...))
}

// object compares a struct's fields with the schema's properties.
func (c *Checker) object(path string, typ reflect.Type, s map[string]any, mode Mode) {
	fields := map[string]Field{}
	GoFields(typ, fields)
	props, required := map[string]map[string]any{}, map[string]bool{}
	c.schemaProps(s, props, required)
	var missing, extra, notSent, notRequired []string
	for name, f := range fields {
		p, ok := props[name]
		if !ok {
			missing = append(missing, name)
			continue
		}
		if f.Always && !required[name] && mode == Sent {
			notRequired = append(notRequired, name)
		}
		c.Compare(path+"."+name, f.Type, p, mode)
	}
	for name := range props {
		f, ok := fields[name]
		if !ok {
			extra = append(extra, name)
		} else if required[name] && !f.Always && !c.Present[name] {
			notSent = append(notSent, name)
		}
	}
	for _, d := range []struct {
		names []string
		what  string
	}{
		{missing, "the schema lacks %v"},
		{extra, "the schema has %v, the Go type does not"},
		{notSent, "the schema requires %v, which the Go type omits when empty"},
		{notRequired, "the Go type always sends %v; the schema should list it as required"},
	} {
		if len(d.names) > 0 {
			sort.Strings(d.names)
			c.errorf("%s (%v): "+d.what, path, typ, d.names)
		}
	}
}

// schemaProps collects an object schema's properties and required names,
// through allOf parts and the references they make.
func (c *Checker) schemaProps(s map[string]any, props map[string]map[string]any, required map[string]bool) {
	if ref, ok := s["$ref"].(string); ok {
		if r, ok := c.Resolve(ref); ok {
			c.schemaProps(r, props, required)
		}
		return
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, part := range all {
			if p, ok := part.(map[string]any); ok {
				c.schemaProps(p, props, required)
			}
		}
	}
	ps, _ := s["properties"].(map[string]any)
	for name, p := range ps {
		m, _ := p.(map[string]any)
		props[name] = m
	}
	req, _ := s["required"].([]any)
	for _, r := range req {
		if name, ok := r.(string); ok {
			required[name] = true
		}
	}
}

// Field is one property of a Go struct's JSON object.
type Field struct {
	Type reflect.Type
	// Always: encoding/json writes it even when empty (no omitempty or
	// omitzero).
	Always bool
}

// GoFields adds a struct's JSON properties to out, embedded structs
// flattened as encoding/json does.
func GoFields(t reflect.Type, out map[string]Field) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	for i := range t.NumField() {
		f := t.Field(i)
		tag, hasTag := f.Tag.Lookup("json")
		name, opts, _ := strings.Cut(tag, ",")
		if name == "-" && opts == "" {
			continue
		}
		if f.Anonymous && !hasTag {
			ft := f.Type
			for ft.Kind() == reflect.Pointer {
				ft = ft.Elem()
			}
			if ft.Kind() == reflect.Struct {
				GoFields(ft, out)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		o := strings.Split(opts, ",")
		out[name] = Field{Type: f.Type, Always: !slices.Contains(o, "omitempty") && !slices.Contains(o, "omitzero")}
	}
}

// kindFits says whether a Go type can encode as the JSON Schema type t.
func kindFits(typ reflect.Type, t string) bool {
	switch typ {
	case reflect.TypeFor[time.Time]():
		return t == "string"
	case reflect.TypeFor[json.RawMessage]():
		return true
	}
	switch typ.Kind() {
	case reflect.String:
		return t == "string"
	case reflect.Bool:
		return t == "boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return t == "integer" || t == "number"
	case reflect.Float32, reflect.Float64:
		return t == "number"
	case reflect.Struct, reflect.Map:
		return t == "object"
	case reflect.Slice, reflect.Array:
		return t == "array"
	case reflect.Interface:
		return true
	}
	return false
}

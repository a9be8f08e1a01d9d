package localapi_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/localapi"
)

// The TS client's types are generated from openapi.json (whose components
// TestComponentsMatchGoTypes checks against the Go types): Go types →
// openapi.json → clients/ts/src/types.gen.ts, so the three cannot drift.

var updateTS = flag.Bool("update", false, "rewrite clients/ts/src/types.gen.ts from openapi.json")

const tsFile = "../../clients/ts/src/types.gen.ts"

// tsNames are the TS client's names of the components it has always
// named differently; every other component keeps its name.
var tsNames = map[string]string{"Rate": "RateInfo", "Project": "ProjectView", "Event": "AgentEvent"}

// tsGeneric: the event envelope is generic over its data, which the
// document leaves open ({}), so an app can name the data type it expects.
var tsGeneric = map[string]struct{ params, prop string }{"Event": {params: "<D = Record<string, unknown>>", prop: "data"}}

// TestTSTypes: types.gen.ts is what openapi.json generates. After a change
// to openapi.json run `go test ./agent/localapi -run TestTSTypes -update`.
func TestTSTypes(t *testing.T) {
	t.Parallel()
	got, err := tsTypes(localapi.OpenAPI())
	if err != nil {
		t.Fatal(err)
	}
	if *updateTS {
		if err := os.WriteFile(tsFile, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(tsFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, got) {
		t.Errorf("%s is not what openapi.json generates: run `go test ./agent/localapi -run TestTSTypes -update`\n%s",
			filepath.Base(tsFile), firstDiff(string(have), string(got)))
	}
}

// firstDiff names the first line where the file and the generated text part.
func firstDiff(have, want string) string {
	h, w := strings.Split(have, "\n"), strings.Split(want, "\n")
	for i := range max(len(h), len(w)) {
		var a, b string
		if i < len(h) {
			a = h[i]
		}
		if i < len(w) {
			b = w[i]
		}
		if a != b {
			return fmt.Sprintf("line %d:\n  file:      %s\n  generated: %s", i+1, a, b)
		}
	}
	return ""
}

// obj is a JSON object that keeps its keys' order, so the TS file follows
// the document.
type obj struct {
	keys []string
	m    map[string]any
}

func (o *obj) get(k string) any { return o.m[k] }

func (o *obj) obj(k string) *obj {
	v, _ := o.m[k].(*obj)
	return v
}

func (o *obj) str(k string) string {
	v, _ := o.m[k].(string)
	return v
}

// parseOrdered decodes JSON with objects as *obj.
func parseOrdered(d *json.Decoder) (any, error) {
	tok, err := d.Token()
	if err != nil {
		return nil, err
	}
	switch tok {
	case json.Delim('{'):
		o := &obj{m: map[string]any{}}
		for d.More() {
			k, err := d.Token()
			if err != nil {
				return nil, err
			}
			v, err := parseOrdered(d)
			if err != nil {
				return nil, err
			}
			o.keys = append(o.keys, k.(string))
			o.m[k.(string)] = v
		}
		_, err := d.Token()
		return o, err
	case json.Delim('['):
		var a []any
		for d.More() {
			v, err := parseOrdered(d)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
		}
		_, err := d.Token()
		return a, err
	}
	return tok, nil
}

// tsTypes renders every component schema of the document as a TS type.
func tsTypes(raw []byte) ([]byte, error) {
	v, err := parseOrdered(json.NewDecoder(bytes.NewReader(raw)))
	if err != nil {
		return nil, fmt.Errorf("openapi.json: %w", err)
	}
	schemas := v.(*obj).obj("components").obj("schemas")
	var b strings.Builder
	b.WriteString(`// Generated from the local API's OpenAPI document (agent/localapi/openapi.json,
// whose components agent/localapi TestComponentsMatchGoTypes checks against
// the agent's Go types) by ` + "`go test ./agent/localapi -run TestTSTypes -update`" + `.
// Do not edit: change the Go types and openapi.json, then regenerate; the
// test fails while this file differs from what the document generates.
// types.ts exports these under the client's public names.
//
// Within v1 fields are only added: every object may carry fields this
// version does not know; ignore them. A union ending in (string & {}) lists
// the values known today: accept others.
`)
	for _, name := range schemas.keys {
		s := schemas.obj(name)
		g := tsGeneric[name]
		ts := tsName(name)
		b.WriteString("\n")
		doc(&b, "", s.str("description"))
		request := s.get("additionalProperties") == false
		var ext []string
		body := s
		if all, ok := s.get("allOf").([]any); ok {
			body = &obj{m: map[string]any{"properties": &obj{m: map[string]any{}}}}
			props := body.obj("properties")
			var req []any
			for _, p := range all {
				part := p.(*obj)
				if ref := part.str("$ref"); ref != "" {
					ext = append(ext, refName(ref))
					continue
				}
				for _, k := range part.obj("properties").keys {
					props.keys = append(props.keys, k)
					props.m[k] = part.obj("properties").get(k)
				}
				r, _ := part.get("required").([]any)
				req = append(req, r...)
			}
			body.m["required"] = req
		}
		fmt.Fprintf(&b, "export interface %s%s ", ts, g.params)
		if len(ext) > 0 {
			fmt.Fprintf(&b, "extends %s ", strings.Join(ext, ", "))
		}
		b.WriteString("{\n")
		req := required(body)
		props := body.obj("properties")
		if props == nil {
			return nil, fmt.Errorf("component %s: no properties", name)
		}
		for _, p := range props.keys {
			ps := props.obj(p)
			doc(&b, "  ", ps.str("description"))
			typ := tsType(ps, request)
			if p == g.prop {
				typ = "D"
			}
			fmt.Fprintf(&b, "  %s%s: %s;\n", tsProp(p), opt(req[p]), typ)
		}
		if s.get("additionalProperties") == true {
			b.WriteString("  [k: string]: unknown;\n")
		}
		b.WriteString("}\n")
	}
	return []byte(b.String()), nil
}

func tsName(component string) string {
	if n, ok := tsNames[component]; ok {
		return n
	}
	return component
}

func refName(ref string) string { return tsName(strings.TrimPrefix(ref, "#/components/schemas/")) }

func required(s *obj) map[string]bool {
	out := map[string]bool{}
	r, _ := s.get("required").([]any)
	for _, n := range r {
		out[n.(string)] = true
	}
	return out
}

func opt(required bool) string {
	if required {
		return ""
	}
	return "?"
}

func tsProp(p string) string {
	for _, r := range p {
		if !(r == '_' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			return fmt.Sprintf("%q", p)
		}
	}
	return p
}

// doc writes a description as a JSDoc line.
func doc(b *strings.Builder, indent, d string) {
	if d == "" {
		return
	}
	fmt.Fprintf(b, "%s/** %s */\n", indent, strings.ReplaceAll(d, "*/", "*\\/"))
}

// tsType is the TS type of a schema. In what a client sends (request, an
// object with additionalProperties false) an enum is closed; in what the
// agent sends it lists the values known today, and so does
// x-extensible-enum, a string whose values may grow within v1.
func tsType(s *obj, request bool) string {
	if ref := s.str("$ref"); ref != "" {
		return refName(ref)
	}
	enum, _ := s.get("enum").([]any)
	open := !request
	if e, ok := s.get("x-extensible-enum").([]any); ok {
		enum, open = e, true
	}
	switch s.str("type") {
	case "string":
		if len(enum) == 0 {
			return "string"
		}
		var alts []string
		for _, v := range enum {
			alts = append(alts, fmt.Sprintf("%q", v))
		}
		if open {
			alts = append(alts, "(string & {})")
		}
		return strings.Join(alts, " | ")
	case "integer", "number":
		return "number"
	case "boolean":
		return "boolean"
	case "array":
		it := tsType(s.obj("items"), request)
		if strings.Contains(it, " | ") {
			it = "(" + it + ")"
		}
		return it + "[]"
	case "object":
		props := s.obj("properties")
		if props == nil {
			if ap := s.obj("additionalProperties"); ap != nil {
				return "Record<string, " + tsType(ap, request) + ">"
			}
			return "Record<string, unknown>"
		}
		req := required(s)
		var fs []string
		for _, p := range props.keys {
			fs = append(fs, fmt.Sprintf("%s%s: %s", tsProp(p), opt(req[p]), tsType(props.obj(p), request)))
		}
		return "{ " + strings.Join(fs, "; ") + " }"
	}
	return "unknown"
}

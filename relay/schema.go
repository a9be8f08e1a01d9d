package relay

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// compiled holds the argument schemas (by command name) and the result
// schemas (by name + ".result"), compiled once on first use. A broken
// embedded schema is a build defect, caught by the tests, so it panics.
var compiled = sync.OnceValue(func() map[string]*jsonschema.Schema {
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	out := make(map[string]*jsonschema.Schema, 2*len(commandNames))
	add := func(key string, b []byte, ok bool) {
		if !ok {
			panic("relay: no embedded schema for " + key)
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			panic(fmt.Sprintf("relay: schema %s: %v", key, err))
		}
		url := "urn:roomrelay:schema:" + key
		if err := c.AddResource(url, doc); err != nil {
			panic(fmt.Sprintf("relay: schema %s: %v", key, err))
		}
		sch, err := c.Compile(url)
		if err != nil {
			panic(fmt.Sprintf("relay: schema %s: %v", key, err))
		}
		out[key] = sch
	}
	for _, name := range commandNames {
		b, ok := SchemaJSON(name)
		add(name, b, ok)
		b, ok = ResultSchemaJSON(name)
		add(name+".result", b, ok)
	}
	return out
})

// ValidateResult checks a command's result (the JSON a device answered)
// against the command's result schema, with the messages of ValidateArgs.
// The device does not call it: tests do, on real results, so the published
// outputSchema cannot drift from what the handlers return.
func ValidateResult(command string, result []byte) error {
	if !KnownCommand(command) {
		return fmt.Errorf("unknown command %s", quote(command))
	}
	doc, err := decodeStrict(result)
	if err != nil {
		return fmt.Errorf("result is not valid JSON: %w", err)
	}
	return schemaError(compiled()[command+".result"].Validate(doc), doc)
}

// maxSchemaCauses caps how many schema problems one message lists.
const maxSchemaCauses = 3

// checkSchema validates an already decoded document against a command's
// schema and turns a failure into an invalid_args error whose message names
// each broken rule and where, e.g.
//
//	schema: 'abcdefg' is too short (idempotency_key: minLength 8)
func checkSchema(command string, doc any) error {
	return schemaError(compiled()[command].Validate(doc), doc)
}

// schemaError words a validation failure of doc (nil stays nil).
func schemaError(err error, doc any) error {
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return Errorf(CodeInvalidArgs, "schema: %v", err)
	}
	var msgs []string
	collectLeaves(ve, doc, &msgs)
	sort.Strings(msgs)
	msgs = slices.Compact(msgs)
	if len(msgs) == 0 {
		msgs = []string{"arguments do not match the schema"}
	}
	more := ""
	if len(msgs) > maxSchemaCauses {
		more = fmt.Sprintf(" (and %d more)", len(msgs)-maxSchemaCauses)
		msgs = msgs[:maxSchemaCauses]
	}
	return Errorf(CodeInvalidArgs, "schema: %s%s", strings.Join(msgs, "; "), more)
}

// collectLeaves gathers one line per leaf cause: the groups above them
// ("doesn't validate with ...") say nothing a client can act on.
func collectLeaves(ve *jsonschema.ValidationError, doc any, out *[]string) {
	if len(ve.Causes) > 0 {
		for _, c := range ve.Causes {
			collectLeaves(c, doc, out)
		}
		return
	}
	*out = append(*out, leafMessage(ve, doc))
}

func leafMessage(ve *jsonschema.ValidationError, doc any) string {
	loc := strings.Join(ve.InstanceLocation, "/")
	val := lookup(doc, ve.InstanceLocation)
	var msg, detail string
	switch k := ve.ErrorKind.(type) {
	case *kind.Type:
		msg = fmt.Sprintf("%s is not of type %s", showValue(val), strings.Join(k.Want, " or "))
	case *kind.MinLength:
		msg, detail = showValue(val)+" is too short", fmt.Sprintf("minLength %d", k.Want)
	case *kind.MaxLength:
		msg, detail = showValue(val)+" is too long", fmt.Sprintf("%d characters, maxLength %d", k.Got, k.Want)
	case *kind.Minimum:
		msg = fmt.Sprintf("%s is less than the minimum of %s", showValue(val), k.Want.RatString())
	case *kind.Maximum:
		msg = fmt.Sprintf("%s is greater than the maximum of %s", showValue(val), k.Want.RatString())
	case *kind.Required:
		quoted := make([]string, len(k.Missing))
		for i, m := range k.Missing {
			quoted[i] = quote(m)
		}
		msg = "missing property " + strings.Join(quoted, ", ")
		if len(k.Missing) > 1 {
			msg = "missing properties " + strings.Join(quoted, ", ")
		}
	case *kind.AdditionalProperties:
		quoted := make([]string, len(k.Properties))
		for i, p := range k.Properties {
			quoted[i] = quote(p)
		}
		sort.Strings(quoted)
		msg = "additional property " + strings.Join(quoted, ", ") + " not allowed"
		if len(k.Properties) > 1 {
			msg = "additional properties " + strings.Join(quoted, ", ") + " not allowed"
		}
	default:
		msg = ve.ErrorKind.LocalizedString(defaultPrinter())
	}
	switch {
	case loc != "" && detail != "":
		return fmt.Sprintf("%s (%s: %s)", msg, showLocation(loc), detail)
	case loc != "":
		return fmt.Sprintf("%s (%s)", msg, showLocation(loc))
	case detail != "":
		return fmt.Sprintf("%s (%s)", msg, detail)
	}
	return msg
}

// defaultPrinter renders the library's own wording for the rarer kinds.
func defaultPrinter() *message.Printer { return message.NewPrinter(language.English) }

// lookup finds the instance value at a location, for the message.
func lookup(doc any, loc []string) any {
	v := doc
	for _, tok := range loc {
		switch x := v.(type) {
		case map[string]any:
			v = x[tok]
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(x) {
				return nil
			}
			v = x[i]
		default:
			return nil
		}
	}
	return v
}

// maxShown bounds how much of a client's value is echoed in a message.
const maxShown = 40

// showValue renders a value the way the seed's messages do: strings in
// single quotes, shortened; numbers as written; containers by kind.
func showValue(v any) string {
	switch x := v.(type) {
	case string:
		return quote(x)
	case json.Number:
		return shorten(string(x))
	case bool:
		return strconv.FormatBool(x)
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return fmt.Sprintf("%v", v)
}

// quote puts s in single quotes, escapes what does not print, and shortens it.
func quote(s string) string { return quoteN(s, maxShown) }

// quoteN is quote with a chosen length limit in runes, for paths and ids.
func quoteN(s string, n int) string {
	q := strconv.QuoteToGraphic(shortenN(s, n))
	q = strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
	return "'" + strings.ReplaceAll(q, "'", `\'`) + "'"
}

func shorten(s string) string { return shortenN(s, maxShown) }

func shortenN(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n-1]) + "…"
}

// showLocation prints an instance location (tokens joined by '/'), escaping
// what does not print so a hostile key cannot garble the message.
func showLocation(loc string) string {
	q := strconv.QuoteToGraphic(shorten(loc))
	return strings.ReplaceAll(q[1:len(q)-1], `\"`, `"`)
}

// decodeStrict parses JSON into the generic form the schema library wants
// (numbers as json.Number) and refuses what a JSON parser elsewhere might
// read differently: duplicate object keys and trailing data.
func decodeStrict(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if errors.Is(err, io.EOF) {
		return nil, io.ErrUnexpectedEOF // the value ended early
	}
	if err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("unexpected data after the JSON value")
	}
	return v, nil
}

// maxDepth keeps a deeply nested document from exhausting the stack.
const maxDepth = 64

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxDepth {
		return nil, fmt.Errorf("nested deeper than %d levels", maxDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			obj := map[string]any{}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				key := kt.(string) // the decoder only yields string keys here
				if _, dup := obj[key]; dup {
					return nil, fmt.Errorf("duplicate key %s", quote(key))
				}
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				obj[key] = v
			}
			if _, err := dec.Token(); err != nil { // '}'
				return nil, err
			}
			return obj, nil
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			if _, err := dec.Token(); err != nil { // ']'
				return nil, err
			}
			return arr, nil
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

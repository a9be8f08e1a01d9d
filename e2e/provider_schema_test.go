package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// The provider channel's contract is docs/provider-protocol.schema.json;
// the desktop app of these tests checks every message roomrelay sends it
// (the hello answer, each request's params, $/cancelRequest) and every
// answer it gives against that document, so the document cannot drift
// from the agent.

var providerSchemas = struct {
	once sync.Once
	c    *jsonschema.Compiler
	err  error
	mu   sync.Mutex
	m    map[string]*jsonschema.Schema
}{m: map[string]*jsonschema.Schema{}}

const providerSchemaURL = "mem://provider-protocol.schema.json"

// checkProvider validates raw against the document's $defs[method][part]
// (part "params" or "result").
func checkProvider(method, part string, raw []byte) error {
	s := &providerSchemas
	s.once.Do(func() {
		b, err := os.ReadFile(filepath.Join("..", "docs", "provider-protocol.schema.json"))
		if err != nil {
			s.err = err
			return
		}
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err != nil {
			s.err = err
			return
		}
		s.c = jsonschema.NewCompiler()
		s.err = s.c.AddResource(providerSchemaURL, doc)
	})
	if s.err != nil {
		return fmt.Errorf("provider-protocol.schema.json: %w", s.err)
	}
	key := method + "/" + part
	s.mu.Lock()
	sch, ok := s.m[key]
	if !ok {
		var err error
		sch, err = s.c.Compile(providerSchemaURL + "#/$defs/" + strings.ReplaceAll(method, "/", "~1") + "/" + part)
		if err != nil {
			s.mu.Unlock()
			return fmt.Errorf("%s: no schema in provider-protocol.schema.json: %w", key, err)
		}
		s.m[key] = sch
	}
	s.mu.Unlock()
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	if err := sch.Validate(doc); err != nil {
		return fmt.Errorf("%s does not match provider-protocol.schema.json: %v\n%s", key, err, raw)
	}
	return nil
}

// TestProviderSchemaCatches: the check refuses what the document forbids.
func TestProviderSchemaCatches(t *testing.T) {
	if err := checkProvider("rooms.read", "params", []byte(`{"deadline_ms":1,"project":"p","room_id":"r"}`)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct{ method, part, raw string }{
		{"rooms.read", "params", `{"deadline_ms":1,"project":"p"}`},
		{"apps.list", "result", `{"apps":[{"instance_id":"a","name":"n","source":"zip","launcher":{"state":"active","position":1}}],"next_cursor":""}`},
		{"$/cancelRequest", "params", `{}`},
	} {
		if err := checkProvider(c.method, c.part, []byte(c.raw)); err == nil {
			t.Errorf("%s %s passed: %s", c.method, c.part, c.raw)
		}
	}
	if err := checkProvider("rooms.delete", "params", []byte(`{}`)); err == nil {
		t.Error("a method the document does not define passed")
	}
}

package localapi_test

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/internal/jsonshape"
	"github.com/roomrelay/roomrelay/relay"
)

// eventSamples is one payload of each event type with every field set, so
// an optional field is in the sample too.
func eventSamples() []events.Payload {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	st := events.Status{State: "online", Hub: "https://hub.example", DeviceID: "dev_1", SessionID: "s_1",
		ConnectedSince: now, LastError: "dial: refused", LastErrorAt: now, NextRetryAt: now, Reconnects: 1,
		InFlight: 2, QueuedEvents: 3, Notes: []string{"a note"}, PID: 42, UpdatedAt: now}
	ps := events.ProviderState{Selected: "app", Connected: true, App: "desk", Version: "1.0", PID: 43, Exe: "/usr/bin/desk", Since: now}
	return []events.Payload{
		events.StatusChanged{Status: st},
		events.PolicyChanged{Projects: []relay.ProjectPolicy{{Project: "p1", Commands: []string{relay.CmdReadRoom}}}, Revision: "rev1"},
		events.ProposalCreated{ProposalID: "prop_1", Project: "p1", RoomID: "r1", Kind: "snippet", Name: "Timer",
			ContentHash: "sha256:00", FileCount: 2, TotalBytes: 300, ProposedBy: "claude (tok_1)", CreatedAt: now},
		events.ProposalDecided{ProposalID: "prop_1", Project: "p1", RoomID: "r1", State: "approved", ContentHash: "sha256:00",
			InstanceID: "app_1", DecidedVia: "app", InstallState: "pending"},
		events.InstallChanged{ProposalID: "prop_1", InstanceID: "app_1", Project: "p1", RoomID: "r1", InstallState: "failed", Error: "refused"},
		events.BuildState{Project: "p1", RoomID: "r1", InstanceID: "app_1", ContentHash: "sha256:00", State: "failed",
			Phase: "render", Summary: "App.tsx:3: boom", CheckedAt: now},
		events.CommandRan{Command: relay.CmdReadRoom, Project: "p1", Room: "r1", Outcome: "ok", Denied: true, DurationMS: 5, Caller: "claude"},
		events.ProviderChanged{Connected: true, App: &events.AppInfo{Name: "desk", Version: "1.0",
			Capabilities: events.Capabilities{Install: true, Files: true, BuildState: true, Notifications: true}},
			PID: 43, Exe: "/usr/bin/desk", Since: now},
		events.ProviderSelected{Provider: "app", PID: 43, Exe: "/usr/bin/desk"},
		events.Snapshot{Status: events.StatusResponse{Status: st, Provider: ps, PendingProposals: 1,
			API: events.APIInfo{Version: localapi.APIVersion, Min: localapi.APIMinVersion}, BootID: "boot"},
			ProjectsRevision: "rev1", PendingProposals: []string{"prop_1"}, Provider: ps},
		events.Resync{Reason: "the agent restarted"},
		events.Ping{},
	}
}

// TestEventsMatchTheContract: agent/events and openapi.json name the same
// event types (the Event schema's x-event-data and its type description),
// and a sample of each payload, marshalled from its Go type, validates
// against its data's schema and has no property the schema does not
// define; ping has no data.
func TestEventsMatchTheContract(t *testing.T) {
	t.Parallel()
	schemas := componentSchemas(t)
	dataOf, _ := schemas["Event"]["x-event-data"].(map[string]any)
	var documented []string
	for typ := range dataOf {
		documented = append(documented, typ)
	}
	sort.Strings(documented)
	declared := slices.Sorted(slices.Values(events.Types()))
	if !slices.Equal(documented, declared) {
		t.Errorf("openapi.json's Event x-event-data names %v; agent/events declares %v", documented, declared)
	}
	desc, _ := schemas["Event"]["properties"].(map[string]any)["type"].(map[string]any)["description"].(string)
	list, _, _ := strings.Cut(desc, ";")
	described := strings.Split(list, ", ")
	sort.Strings(described)
	if !slices.Equal(described, declared) {
		t.Errorf("openapi.json's Event type description lists %v; agent/events declares %v", described, declared)
	}

	raw, err := jsonschema.UnmarshalJSON(bytes.NewReader(localapi.OpenAPI()))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	const url = "mem://openapi.json"
	if err := c.AddResource(url, raw); err != nil {
		t.Fatal(err)
	}
	var sampled []string
	for _, p := range eventSamples() {
		typ := p.EventType()
		sampled = append(sampled, typ)
		data, err := events.Data(p)
		if err != nil {
			t.Errorf("%s: %v", typ, err)
			continue
		}
		want, ok := dataOf[typ]
		if !ok {
			continue // reported above
		}
		if want == false {
			if data != nil {
				t.Errorf("%s has no data in openapi.json, but its payload sends %s", typ, data)
			}
			continue
		}
		// Every field of the Go type is in the sample: a field renamed
		// under omitempty shows up here as one openapi.json lacks.
		fields := map[string]jsonshape.Field{}
		jsonshape.GoFields(reflect.TypeOf(p), fields)
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(data, &obj); err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		for f := range fields {
			if _, ok := obj[f]; !ok {
				t.Errorf("%s: the sample leaves %s out: set every field", typ, f)
			}
		}
		sch, err := c.Compile(url + "#/components/schemas/Event/x-event-data/" + typ)
		if err != nil {
			t.Fatalf("%s: %v", typ, err)
		}
		inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if err := sch.Validate(inst); err != nil {
			t.Errorf("%s data does not match openapi.json: %v\n%s", typ, err, data)
		}
		var v any
		_ = json.Unmarshal(data, &v)
		for _, extra := range undocumented(schemas, want.(map[string]any), v, typ) {
			t.Errorf("%s sends %s, which openapi.json does not define", typ, extra)
		}
	}
	sort.Strings(sampled)
	if !slices.Equal(sampled, declared) {
		t.Errorf("the samples cover %v; agent/events declares %v: add a sample of each payload", sampled, declared)
	}
}

// undocumented lists the properties of v, at any depth, that schema s
// (through $ref and allOf) does not define.
func undocumented(schemas map[string]map[string]any, s map[string]any, v any, at string) []string {
	var out []string
	switch v := v.(type) {
	case map[string]any:
		props := properties(schemas, s)
		for k, val := range v {
			ps, ok := props[k]
			if !ok {
				out = append(out, at+"."+k)
				continue
			}
			out = append(out, undocumented(schemas, ps, val, at+"."+k)...)
		}
	case []any:
		items, _ := resolve(schemas, s)["items"].(map[string]any)
		for _, val := range v {
			out = append(out, undocumented(schemas, items, val, at+"[]")...)
		}
	}
	return out
}

// resolve follows s's $ref to its component.
func resolve(schemas map[string]map[string]any, s map[string]any) map[string]any {
	for s != nil {
		ref, ok := s["$ref"].(string)
		if !ok {
			return s
		}
		s = schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
	}
	return s
}

// properties are the properties s defines, with those of its allOf parts.
func properties(schemas map[string]map[string]any, s map[string]any) map[string]map[string]any {
	s = resolve(schemas, s)
	out := map[string]map[string]any{}
	if ps, ok := s["properties"].(map[string]any); ok {
		for k, p := range ps {
			out[k], _ = p.(map[string]any)
		}
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, part := range all {
			pm, _ := part.(map[string]any)
			for k, p := range properties(schemas, pm) {
				out[k] = p
			}
		}
	}
	return out
}

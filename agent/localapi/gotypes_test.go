package localapi_test

import (
	"encoding/json"
	"reflect"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/provider"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The local API's contract has one source: the Go types the handlers encode
// and decode. openapi.json's component schemas are checked against them
// field for field here, and clients/ts/src/types.ts against openapi.json by
// the TS client's own test (test/types.test.ts), so a copy that drifts
// fails CI.

// goTypes maps each component schema to the Go type that is its source.
var goTypes = map[string]reflect.Type{
	"ErrorResponse":         reflect.TypeFor[errorResponse](),
	"ProviderState":         reflect.TypeFor[localapi.ProviderState](),
	"APIInfo":               reflect.TypeFor[localapi.APIInfo](),
	"Status":                reflect.TypeFor[localapi.StatusResponse](),
	"Event":                 reflect.TypeFor[localapi.Event](),
	"Snapshot":              reflect.TypeFor[localapi.Snapshot](),
	"Rate":                  reflect.TypeFor[allowlist.RateInfo](),
	"Project":               reflect.TypeFor[localapi.ProjectView](),
	"ProjectsResponse":      reflect.TypeFor[localapi.ProjectsResponse](),
	"ProjectSpec":           reflect.TypeFor[allowlist.ProjectSpec](),
	"EnableRequest":         reflect.TypeFor[allowlist.EnableRequest](),
	"ProjectResponse":       reflect.TypeFor[localapi.ProjectResponse](),
	"Proposal":              reflect.TypeFor[rooms.Proposal](),
	"ProposalsResponse":     reflect.TypeFor[localapi.ProposalsResponse](),
	"HiddenReport":          reflect.TypeFor[localapi.HiddenReport](),
	"ProposalFile":          reflect.TypeFor[localapi.ProposalFile](),
	"ProposalDetail":        reflect.TypeFor[localapi.ProposalDetail](),
	"CheckResponse":         reflect.TypeFor[localapi.CheckResponse](),
	"DecideRequest":         reflect.TypeFor[localapi.DecideRequest](),
	"DecisionResponse":      reflect.TypeFor[localapi.DecisionResponse](),
	"AuditOutcome":          reflect.TypeFor[localapi.AuditOutcome](),
	"AuditResponse":         reflect.TypeFor[auditResponse](),
	"ProposalDecidedData":   reflect.TypeFor[localapi.ProposalDecidedData](),
	"ProposalCreatedData":   reflect.TypeFor[daemon.ProposalCreated](),
	"CommandRanData":        reflect.TypeFor[daemon.CommandRan](),
	"OAuthApprovalRequest":  reflect.TypeFor[hubapi.OAuthApprovalRequest](),
	"OAuthDecideRequest":    reflect.TypeFor[localapi.OAuthDecideRequest](),
	"OAuthDecideResponse":   reflect.TypeFor[localapi.OAuthDecideResponse](),
	"InstallChangedData":    reflect.TypeFor[provider.InstallChanged](),
	"ProviderChangedData":   reflect.TypeFor[provider.ProviderChanged](),
	"BuildStateData":        reflect.TypeFor[daemon.BuildStateData](),
	"ProviderSelection":     reflect.TypeFor[localapi.ProviderSelection](),
	"ProviderSelectRequest": reflect.TypeFor[providerSelectRequest](),
	"ProviderSelectedData":  reflect.TypeFor[localapi.ProviderSelectedData](),
}

// requestBodies are what clients send: there "required" is what a client
// must send, not what the Go type would encode.
var requestBodies = map[string]bool{"ProjectSpec": true, "EnableRequest": true, "DecideRequest": true,
	"OAuthDecideRequest": true, "ProviderSelectRequest": true}

// Shapes the handlers write without a named type (a map literal, an
// anonymous struct), written out here as the handlers do.
type (
	errorResponse struct {
		Error localapi.APIError `json:"error"`
	}
	auditResponse struct {
		Entries []localapi.AuditOutcome `json:"entries"`
	}
	providerSelectRequest struct {
		Provider string `json:"provider"`
	}
)

// goFields is a struct's JSON object: each property and whether it is
// always sent (no omitempty or omitzero).
func goFields(t reflect.Type, out map[string]bool) {
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
			goFields(f.Type, out)
			continue
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		optional := slices.Contains(strings.Split(opts, ","), "omitempty") || slices.Contains(strings.Split(opts, ","), "omitzero")
		out[name] = !optional
	}
}

// docFields is a component schema's properties and whether each is
// required, through allOf references.
func docFields(t *testing.T, schemas map[string]map[string]any, name string, out map[string]bool) {
	s, ok := schemas[name]
	if !ok {
		t.Fatalf("no component %s", name)
	}
	if all, ok := s["allOf"].([]any); ok {
		for _, part := range all {
			p := part.(map[string]any)
			if ref, ok := p["$ref"].(string); ok {
				docFields(t, schemas, strings.TrimPrefix(ref, "#/components/schemas/"), out)
				continue
			}
			docProps(p, out)
		}
	}
	docProps(s, out)
}

func docProps(s map[string]any, out map[string]bool) {
	props, _ := s["properties"].(map[string]any)
	for p := range props {
		out[p] = out[p] || false
	}
	req, _ := s["required"].([]any)
	for _, r := range req {
		out[r.(string)] = true
	}
}

// TestComponentsMatchGoTypes: every component schema of openapi.json has
// exactly the properties of its Go type; what the document requires the Go
// type always sends, and (in what the agent sends) what the Go type always
// sends the document requires. Nested objects written inline in the
// document are not compared; those with a component of their own are.
func TestComponentsMatchGoTypes(t *testing.T) {
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(localapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	for name := range doc.Components.Schemas {
		if goTypes[name] == nil {
			t.Errorf("component %s has no Go type in goTypes: name the type the handlers encode", name)
		}
	}
	for name, typ := range goTypes {
		if doc.Components.Schemas[name] == nil {
			t.Errorf("goTypes names %s, which openapi.json does not define", name)
			continue
		}
		g, d := map[string]bool{}, map[string]bool{}
		goFields(typ, g)
		docFields(t, doc.Components.Schemas, name, d)
		var missing, extra, notSent, notRequired []string
		for p, always := range g {
			req, ok := d[p]
			if !ok {
				missing = append(missing, p)
			} else if always && !req && !requestBodies[name] {
				notRequired = append(notRequired, p)
			}
		}
		for p, req := range d {
			always, ok := g[p]
			if !ok {
				extra = append(extra, p)
			} else if req && !always {
				notSent = append(notSent, p)
			}
		}
		sort.Strings(missing)
		sort.Strings(extra)
		sort.Strings(notSent)
		sort.Strings(notRequired)
		if len(missing) > 0 {
			t.Errorf("%s (%v): openapi.json lacks %v", name, typ, missing)
		}
		if len(extra) > 0 {
			t.Errorf("%s (%v): openapi.json has %v, the Go type does not", name, typ, extra)
		}
		if len(notSent) > 0 {
			t.Errorf("%s (%v): openapi.json requires %v, which the Go type omits when empty", name, typ, notSent)
		}
		if len(notRequired) > 0 {
			t.Errorf("%s (%v): the Go type always sends %v; openapi.json should list it as required", name, typ, notRequired)
		}
	}
}

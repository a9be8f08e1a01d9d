package localapi_test

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/internal/jsonshape"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The local API's contract has one source: the Go types the handlers encode
// and decode. openapi.json's component schemas are checked against them
// field for field here, nested objects included, and
// clients/ts/src/types.gen.ts is generated from openapi.json (TestTSTypes),
// so a copy that drifts fails CI.

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
	"ProposalDecidedData":   reflect.TypeFor[events.ProposalDecided](),
	"ProposalCreatedData":   reflect.TypeFor[events.ProposalCreated](),
	"CommandRanData":        reflect.TypeFor[events.CommandRan](),
	"OAuthApprovalRequest":  reflect.TypeFor[hubapi.OAuthApprovalRequest](),
	"OAuthDecideRequest":    reflect.TypeFor[localapi.OAuthDecideRequest](),
	"OAuthDecideResponse":   reflect.TypeFor[localapi.OAuthDecideResponse](),
	"InstallChangedData":    reflect.TypeFor[events.InstallChanged](),
	"ProviderChangedData":   reflect.TypeFor[events.ProviderChanged](),
	"BuildStateData":        reflect.TypeFor[events.BuildState](),
	"ProviderSelection":     reflect.TypeFor[localapi.ProviderSelection](),
	"ProviderSelectRequest": reflect.TypeFor[providerSelectRequest](),
	"ProviderSelectedData":  reflect.TypeFor[events.ProviderSelected](),
	"StatusEventData":       reflect.TypeFor[events.StatusChanged](),
	"PolicyChangedData":     reflect.TypeFor[events.PolicyChanged](),
	"ResyncData":            reflect.TypeFor[events.Resync](),
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

// componentSchemas is openapi.json's components/schemas, by name.
func componentSchemas(t *testing.T) map[string]map[string]any {
	t.Helper()
	var doc struct {
		Components struct {
			Schemas map[string]map[string]any `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(localapi.OpenAPI(), &doc); err != nil {
		t.Fatal(err)
	}
	return doc.Components.Schemas
}

// TestComponentsMatchGoTypes: every component schema of openapi.json has
// exactly the properties of its Go type, nested objects written inline
// included (and those with a component of their own through their
// reference); what the document requires the Go type always sends, and
// (in what the agent sends) what the Go type always sends the document
// requires; a property's JSON type is one its Go type encodes to.
func TestComponentsMatchGoTypes(t *testing.T) {
	schemas := componentSchemas(t)
	for name := range schemas {
		if goTypes[name] == nil {
			t.Errorf("component %s has no Go type in goTypes: name the type the handlers encode", name)
		}
	}
	c := jsonshape.Checker{Resolve: func(ref string) (map[string]any, bool) {
		s, ok := schemas[strings.TrimPrefix(ref, "#/components/schemas/")]
		return s, ok
	}}
	for name, typ := range goTypes {
		s := schemas[name]
		if s == nil {
			t.Errorf("goTypes names %s, which openapi.json does not define", name)
			continue
		}
		mode := jsonshape.Sent
		if requestBodies[name] {
			mode = jsonshape.Read
		}
		c.Compare(name, typ, s, mode)
	}
	for _, d := range c.Drift() {
		t.Errorf("openapi.json: %s", d)
	}
}

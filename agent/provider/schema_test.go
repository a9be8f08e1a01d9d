package provider

import (
	"encoding/json"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/internal/jsonshape"
)

// wireTypes are, per method of the protocol, the Go types of its params
// and result, and which way each travels (Sent: roomrelay writes it; Read:
// roomrelay reads what the app writes). nil: roomrelay has no type for it
// (a notification it ignores, a result it ignores).
var wireTypes = []struct {
	method                 string
	params, result         reflect.Type
	paramsMode, resultMode jsonshape.Mode
}{
	{MethodHello, reflect.TypeFor[helloParams](), reflect.TypeFor[HelloResult](), jsonshape.Read, jsonshape.Sent},
	{MethodRoomsChanged, reflect.TypeFor[roomsChangedParams](), nil, jsonshape.Read, 0},
	{MethodAppsChanged, nil, nil, 0, 0},
	{MethodCancel, reflect.TypeFor[cancelParams](), nil, jsonshape.Sent, 0},
	{MethodRoomsRead, reflect.TypeFor[roomRef](), reflect.TypeFor[roomsReadResult](), jsonshape.Sent, jsonshape.Read},
	{MethodAppsList, reflect.TypeFor[appsListParams](), reflect.TypeFor[appsListResult](), jsonshape.Sent, jsonshape.Read},
	{MethodAppsStatus, reflect.TypeFor[appRef](), reflect.TypeFor[appsStatusResult](), jsonshape.Sent, jsonshape.Read},
	{MethodAppsFiles, reflect.TypeFor[appRef](), reflect.TypeFor[appsFilesResult](), jsonshape.Sent, jsonshape.Read},
	{MethodAppsInstall, reflect.TypeFor[appsInstallParams](), reflect.TypeFor[appsInstallResult](), jsonshape.Sent, jsonshape.Read},
	{MethodSetBuildState, reflect.TypeFor[setBuildStateParams](), nil, jsonshape.Sent, 0},
}

// TestSchemaMatchesGoTypes: docs/provider-protocol.schema.json defines
// every method of the protocol and no other, and each method's params and
// result have exactly the properties of the Go type roomrelay sends or
// reads, nested objects included: what roomrelay always sends the schema
// requires and the reverse; what the schema requires of the app roomrelay
// reads; each property's JSON type is one its Go type encodes to. The
// schema's bounds and patterns stay written in it; e2e TestProviderApp
// validates real traffic against it.
func TestSchemaMatchesGoTypes(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("../../docs/provider-protocol.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Defs map[string]map[string]any `json:"$defs"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	c := jsonshape.Checker{
		Resolve: func(ref string) (map[string]any, bool) {
			s, ok := doc.Defs[strings.TrimPrefix(ref, "#/$defs/")]
			return s, ok
		},
		// call sets it from the caller's deadline, which every call has.
		Present: map[string]bool{"deadline_ms": true},
	}
	var methods []string
	for _, w := range wireTypes {
		methods = append(methods, w.method)
		d, ok := doc.Defs[w.method]
		if !ok {
			t.Errorf("the schema has no $defs entry for %s", w.method)
			continue
		}
		if _, ok := d["params"].(map[string]any); !ok {
			t.Errorf("%s: the schema defines no params", w.method)
		}
		if p, ok := d["params"].(map[string]any); ok && w.params != nil {
			c.Compare(w.method+" params", w.params, p, w.paramsMode)
		}
		if r, ok := d["result"].(map[string]any); ok && w.result != nil {
			c.Compare(w.method+" result", w.result, r, w.resultMode)
		} else if w.result != nil {
			t.Errorf("%s: the schema defines no result; roomrelay's is %v", w.method, w.result)
		}
	}
	for name, d := range doc.Defs {
		_, params := d["params"]
		_, result := d["result"]
		if (params || result) && !slices.Contains(methods, name) {
			t.Errorf("the schema defines method %s, which roomrelay does not speak (or wireTypes lacks it)", name)
		}
	}
	c.Compare("error", reflect.TypeFor[rpcError](), doc.Defs["error"], jsonshape.Sent)
	for _, d := range c.Drift() {
		t.Errorf("provider-protocol.schema.json: %s", d)
	}
}

package localapi

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// The contract tests read openapi.json as data: OpenAPI 3.1's schema objects
// are JSON Schema 2020-12, which the validator the device already links
// (santhosh-tekuri/jsonschema, relay's command schemas) checks, so the
// contract needs no OpenAPI library at all.

type oaDoc struct {
	Paths map[string]map[string]struct {
		Responses map[string]struct {
			Content map[string]json.RawMessage `json:"content"`
		} `json:"responses"`
	} `json:"paths"`
	Components struct {
		Schemas map[string]map[string]any `json:"schemas"`
	} `json:"components"`
}

func loadDoc(t *testing.T, b []byte) oaDoc {
	t.Helper()
	var d oaDoc
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	return d
}

var (
	compilerOnce sync.Once
	compiler     *jsonschema.Compiler
)

const docURL = "mem://openapi.json"

// responseSchema compiles the schema of a documented response.
func responseSchema(t *testing.T, path, method string, status int, ctype string) *jsonschema.Schema {
	t.Helper()
	compilerOnce.Do(func() {
		doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(OpenAPI()))
		if err != nil {
			panic(err)
		}
		compiler = jsonschema.NewCompiler()
		if err := compiler.AddResource(docURL, doc); err != nil {
			panic(err)
		}
	})
	esc := func(s string) string { return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1") }
	ptr := fmt.Sprintf("#/paths/%s/%s/responses/%d/content/%s/schema", esc(path), strings.ToLower(method), status, esc(ctype))
	sch, err := compiler.Compile(docURL + ptr)
	if err != nil {
		t.Fatalf("%s %s %d is not documented: %v", method, path, status, err)
	}
	return sch
}

// checkResponse validates a real response body against the document.
func checkResponse(t *testing.T, method, path string, status int, body []byte) {
	t.Helper()
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		t.Fatalf("%s %s: body is not JSON: %v: %s", method, path, err, body)
	}
	if err := responseSchema(t, path, method, status, "application/json").Validate(v); err != nil {
		t.Errorf("%s %s %d does not match openapi.json: %v\nbody: %s", method, path, status, err, body)
	}
}

// TestEveryRouteIsDocumented: the server's routes and the document's paths
// are the same set.
func TestEveryRouteIsDocumented(t *testing.T) {
	t.Parallel()
	doc := loadDoc(t, OpenAPI())
	var documented []string
	for p, ops := range doc.Paths {
		for m := range ops {
			documented = append(documented, strings.ToUpper(m)+" "+p)
		}
	}
	var served []string
	for _, r := range routeTable {
		served = append(served, r.method+" "+r.path)
	}
	slices.Sort(documented)
	slices.Sort(served)
	if !slices.Equal(documented, served) {
		t.Fatalf("routes and openapi.json differ:\nserved     %v\ndocumented %v", served, documented)
	}
}

// TestResponsesMatchTheDocument calls every route over the socket and
// validates each real response (successes and errors) and event line.
func TestResponsesMatchTheDocument(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.Enrolled = func() []string { return []string{"p1", "p9"} } })
	ctx := context.Background()
	p := seedProposal(t, ta.store, "key-contract")
	evs := ta.events("?initial=1")

	call := func(method, path, docPath string, hdr map[string]string, body string, want int) map[string]any {
		t.Helper()
		req, _ := http.NewRequest(method, "http://"+Host+Prefix+strings.TrimPrefix(path, "/"), strings.NewReader(body))
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := ta.client.hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		buf.ReadFrom(resp.Body)
		if resp.StatusCode != want {
			t.Fatalf("%s %s: %d, want %d: %s", method, path, resp.StatusCode, want, buf.Bytes())
		}
		checkResponse(t, method, docPath, resp.StatusCode, buf.Bytes())
		var m map[string]any
		json.Unmarshal(buf.Bytes(), &m)
		return m
	}
	call("GET", "status", "/status", nil, "", 200)
	call("GET", "status", "/status", map[string]string{"Origin": "https://evil.example"}, "", 403)
	pr := call("GET", "projects", "/projects", nil, "", 200)
	rev := `"` + pr["revision"].(string) + `"`
	spec, _ := json.Marshal(allowlist.ProjectSpec{Enabled: true, Commands: []string{relay.CmdReadRoom}, Rate: &allowlist.RateInfo{Events: 10, PerSeconds: 60, Burst: 5}, Max: map[string]int{allowlist.BoundListLimit: 10}})
	call("PUT", "projects/p1", "/projects/{id}", nil, string(spec), 428)
	call("PUT", "projects/p1", "/projects/{id}", map[string]string{"If-Match": `"stale"`}, string(spec), 412)
	call("PUT", "projects/p1", "/projects/{id}", map[string]string{"If-Match": rev}, `{"enabled":true,"commands":["nope"]}`, 400)
	call("PUT", "projects/p1", "/projects/{id}", map[string]string{"If-Match": rev}, string(spec), 200)
	call("POST", "projects/p2/enable", "/projects/{id}/enable", nil, `{"allow":["propose_room_snippet_app"],"rooms":["*"]}`, 200)
	call("POST", "projects/p2/disable", "/projects/{id}/disable", nil, "", 200)
	call("POST", "projects/zz/disable", "/projects/{id}/disable", nil, "", 404)
	call("GET", "projects", "/projects", nil, "", 200)
	sel := call("GET", "policy/provider", "/policy/provider", nil, "", 200)
	selRev := `"` + sel["revision"].(string) + `"`
	call("PUT", "policy/provider", "/policy/provider", nil, `{"provider":"app"}`, 428)
	call("PUT", "policy/provider", "/policy/provider", map[string]string{"If-Match": `"stale"`}, `{"provider":"app"}`, 412)
	call("PUT", "policy/provider", "/policy/provider", map[string]string{"If-Match": selRev}, `{"provider":"cloud"}`, 400)
	call("PUT", "policy/provider", "/policy/provider", map[string]string{"If-Match": selRev}, `{"provider":"app"}`, 200)
	call("GET", "proposals", "/proposals", nil, "", 200)
	call("GET", "proposals?state=all", "/proposals", nil, "", 200)
	call("GET", "proposals/"+p.ID, "/proposals/{id}", nil, "", 200)
	call("GET", "proposals/nope", "/proposals/{id}", nil, "", 404)
	call("POST", "proposals/"+p.ID+"/check", "/proposals/{id}/check", nil, "", 503)
	call("POST", "proposals/"+p.ID+"/approve", "/proposals/{id}/approve", nil, `{"content_hash":"`+strings.Repeat("1", 64)+`"}`, 409)
	call("POST", "proposals/"+p.ID+"/approve", "/proposals/{id}/approve", nil, `{"content_hash":"`+p.ContentHash+`","decided_via":"cli"}`, 200)
	call("POST", "proposals/"+p.ID+"/approve", "/proposals/{id}/approve", nil, `{"content_hash":"`+p.ContentHash+`"}`, 200)
	call("POST", "proposals/"+p.ID+"/decline", "/proposals/{id}/decline", nil, "", 409)
	call("POST", "proposals/"+p.ID+"/check", "/proposals/{id}/check", nil, "", 409)
	call("GET", "audit?limit=10", "/audit", nil, "", 200)
	call("GET", "audit?limit=0", "/audit", nil, "", 400)
	call("GET", "openapi.json", "/openapi.json", nil, "", 200)
	call("GET", "provider", "/provider", nil, "", 503)
	call("GET", "oauth/K7Q2-9XWM", "/oauth/{code}", nil, "", 503)
	call("POST", "oauth/K7Q2-9XWM", "/oauth/{code}", nil, `{"approve":true,"scope":"admin"}`, 400)
	call("POST", "oauth/K7Q2-9XWM", "/oauth/{code}", nil, `{"approve":true}`, 503)

	// Event lines: the snapshot, then proposal_decided.
	evSchema := responseSchema(t, "/events", "GET", 200, "application/x-ndjson")
	for range 2 {
		e := evs.nextNonPing()
		b, _ := json.Marshal(e)
		v, _ := jsonschema.UnmarshalJSON(bytes.NewReader(b))
		if err := evSchema.Validate(v); err != nil {
			t.Errorf("event %s: %v", b, err)
		}
		if e.Type == events.TypeSnapshot {
			sv, _ := jsonschema.UnmarshalJSON(bytes.NewReader(e.Data))
			sch, err := compiler.Compile(docURL + "#/components/schemas/Snapshot")
			if err != nil {
				t.Fatal(err)
			}
			if err := sch.Validate(sv); err != nil {
				t.Errorf("snapshot %s: %v", e.Data, err)
			}
		}
	}
	_ = ctx
	_ = rooms.ProposalPending
}

// TestV1IsAdditive compares openapi.json with the committed v1 baseline
// (testdata/openapi-v1-baseline.json): within v1 no path, method, response
// status, schema or property may disappear, no property may change type and
// no required list may grow (old clients would then send too little).
// Additions pass; a release copies the document over the baseline.
func TestV1IsAdditive(t *testing.T) {
	t.Parallel()
	base, err := os.ReadFile("testdata/openapi-v1-baseline.json")
	if err != nil {
		t.Fatal(err)
	}
	if errs := additiveOnly(loadDoc(t, base), loadDoc(t, OpenAPI())); len(errs) > 0 {
		t.Fatalf("openapi.json breaks v1 (see docs/localapi.md, Versioning):\n%s", strings.Join(errs, "\n"))
	}
}

func additiveOnly(old, cur oaDoc) []string {
	var errs []string
	for p, ops := range old.Paths {
		for m, o := range ops {
			co, ok := cur.Paths[p][m]
			if !ok {
				errs = append(errs, "removed: "+strings.ToUpper(m)+" "+p)
				continue
			}
			for st := range o.Responses {
				if _, ok := co.Responses[st]; !ok {
					errs = append(errs, fmt.Sprintf("removed: %s %s response %s", strings.ToUpper(m), p, st))
				}
			}
		}
	}
	for name, s := range old.Components.Schemas {
		c, ok := cur.Components.Schemas[name]
		if !ok {
			errs = append(errs, "removed schema "+name)
			continue
		}
		errs = append(errs, compareSchema(name, s, c)...)
	}
	slices.Sort(errs)
	return errs
}

func compareSchema(name string, old, cur map[string]any) []string {
	var errs []string
	if fmt.Sprint(old["type"]) != fmt.Sprint(cur["type"]) {
		errs = append(errs, fmt.Sprintf("%s: type %v became %v", name, old["type"], cur["type"]))
	}
	if fmt.Sprint(old["$ref"]) != fmt.Sprint(cur["$ref"]) {
		errs = append(errs, fmt.Sprintf("%s: $ref %v became %v", name, old["$ref"], cur["$ref"]))
	}
	oreq, _ := old["required"].([]any)
	creq, _ := cur["required"].([]any)
	for _, r := range creq {
		if !slices.Contains(oreq, r) && old["additionalProperties"] == false {
			errs = append(errs, fmt.Sprintf("%s: request field %v became required", name, r))
		}
	}
	for _, r := range oreq {
		if !slices.Contains(creq, r) && old["additionalProperties"] != false {
			errs = append(errs, fmt.Sprintf("%s: response field %v is no longer always sent", name, r))
		}
	}
	if oe, ok := old["enum"].([]any); ok {
		ce, _ := cur["enum"].([]any)
		for _, v := range oe {
			if !slices.Contains(ce, v) {
				errs = append(errs, fmt.Sprintf("%s: enum value %v removed", name, v))
			}
		}
	}
	op, _ := old["properties"].(map[string]any)
	cp, _ := cur["properties"].(map[string]any)
	for k, v := range op {
		cv, ok := cp[k]
		if !ok {
			errs = append(errs, fmt.Sprintf("%s: property %s removed", name, k))
			continue
		}
		om, _ := v.(map[string]any)
		cm, _ := cv.(map[string]any)
		errs = append(errs, compareSchema(name+"."+k, om, cm)...)
	}
	if oa, ok := old["allOf"].([]any); ok {
		ca, _ := cur["allOf"].([]any)
		for i, x := range oa {
			if i >= len(ca) {
				errs = append(errs, fmt.Sprintf("%s: allOf[%d] removed", name, i))
				continue
			}
			om, _ := x.(map[string]any)
			cm, _ := ca[i].(map[string]any)
			errs = append(errs, compareSchema(fmt.Sprintf("%s.allOf[%d]", name, i), om, cm)...)
		}
	}
	if oi, ok := old["items"].(map[string]any); ok {
		ci, _ := cur["items"].(map[string]any)
		errs = append(errs, compareSchema(name+"[]", oi, ci)...)
	}
	return errs
}

// TestAdditiveCheckCatches: the check itself fails on a removed field, a
// retyped one and a removed path (so TestV1IsAdditive can fail).
func TestAdditiveCheckCatches(t *testing.T) {
	t.Parallel()
	base := loadDoc(t, OpenAPI())
	for _, tc := range []struct {
		name string
		edit func(m map[string]any)
		want string
	}{
		{"removed field", func(m map[string]any) {
			delete(m["components"].(map[string]any)["schemas"].(map[string]any)["Status"].(map[string]any)["properties"].(map[string]any), "boot_id")
		}, "property boot_id removed"},
		{"retyped field", func(m map[string]any) {
			m["components"].(map[string]any)["schemas"].(map[string]any)["Status"].(map[string]any)["properties"].(map[string]any)["in_flight"] = map[string]any{"type": "string"}
		}, "in_flight: type integer became string"},
		{"removed path", func(m map[string]any) { delete(m["paths"].(map[string]any), "/audit") }, "removed: GET /audit"},
	} {
		var m map[string]any
		json.Unmarshal(OpenAPI(), &m)
		tc.edit(m)
		b, _ := json.Marshal(m)
		errs := additiveOnly(base, loadDoc(t, b))
		if !strings.Contains(strings.Join(errs, "\n"), tc.want) {
			t.Errorf("%s: got %v, want %q", tc.name, errs, tc.want)
		}
	}
}

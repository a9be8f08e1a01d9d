package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// mcpSession connects the go-sdk client to the hub's /mcp with a token.
// progress counts progress notifications it receives.
func mcpSession(t testing.TB, h *runningHub, token string, progress *atomic.Int64) *mcp.ClientSession {
	t.Helper()
	opts := &mcp.ClientOptions{}
	if progress != nil {
		opts.ProgressNotificationHandler = func(context.Context, *mcp.ProgressNotificationClientRequest) { progress.Add(1) }
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "roomrelay-e2e", Version: "test"}, opts)
	tr := &mcp.StreamableClientTransport{Endpoint: h.URL() + "/mcp", HTTPClient: &http.Client{Transport: hubclient.Bearer{Token: token}}}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cs, err := c.Connect(ctx, tr, nil)
	if err != nil {
		t.Fatalf("mcp connect: %v", err)
	}
	t.Cleanup(func() { cs.Close() })
	return cs
}

// clientToken issues a client token through the admin API.
func clientToken(t testing.TB, h *runningHub, project, scope string) *hubapi.ClientToken {
	t.Helper()
	tok, err := h.client.CreateClientToken(context.Background(), project, scope, "e2e-"+scope)
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// tool calls one tool and fails the test on a protocol error (a tool error
// is a result, for the caller to check).
func tool(t testing.TB, cs *mcp.ClientSession, name string, args any) *mcp.CallToolResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if _, bench := t.(*testing.B); !bench { // benchmarks measure the call alone
		checkOutput(t, cs, name, res)
	}
	return res
}

// outputSchemas caches each session's tools' outputSchema, compiled.
var outputSchemas sync.Map // *mcp.ClientSession -> map[string]*jsonschema.Schema

// checkOutput fails the test unless a successful result's
// structuredContent matches the outputSchema its tool publishes in
// tools/list: every tool call of these tests is a real result (a real hub,
// a real agent) checked against the published contract.
func checkOutput(t testing.TB, cs *mcp.ClientSession, name string, res *mcp.CallToolResult) {
	t.Helper()
	if res.IsError {
		return
	}
	v, ok := outputSchemas.Load(cs)
	if !ok {
		lt, err := cs.ListTools(context.Background(), nil)
		if err != nil {
			t.Fatalf("tools/list: %v", err)
		}
		c := jsonschema.NewCompiler()
		m := map[string]*jsonschema.Schema{}
		for _, tl := range lt.Tools {
			if tl.OutputSchema == nil {
				t.Fatalf("%s publishes no outputSchema", tl.Name)
			}
			b, _ := json.Marshal(tl.OutputSchema)
			doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
			if err == nil {
				err = c.AddResource("mem://"+tl.Name, doc)
			}
			if err == nil {
				m[tl.Name], err = c.Compile("mem://" + tl.Name)
			}
			if err != nil {
				t.Fatalf("%s's outputSchema: %v", tl.Name, err)
			}
		}
		v, _ = outputSchemas.LoadOrStore(cs, m)
		t.Cleanup(func() { outputSchemas.Delete(cs) })
	}
	sch := v.(map[string]*jsonschema.Schema)[name]
	if sch == nil {
		t.Fatalf("%s: no such tool in tools/list", name)
	}
	b, _ := json.Marshal(res.StructuredContent)
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		t.Fatalf("%s: structuredContent: %v", name, err)
	}
	if err := sch.Validate(doc); err != nil {
		t.Errorf("%s: the result does not match its outputSchema: %v\nresult: %s", name, err, b)
	}
}

func resultText(r *mcp.CallToolResult) string {
	var b strings.Builder
	for _, c := range r.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String()
}

// wantOK fails unless r is a success, and decodes its structuredContent.
func wantOK[T any](t testing.TB, what string, r *mcp.CallToolResult) T {
	t.Helper()
	var out T
	if r.IsError {
		t.Fatalf("%s: tool error %q", what, resultText(r))
	}
	b, _ := json.Marshal(r.StructuredContent)
	if err := json.Unmarshal(b, &out); err != nil {
		t.Fatalf("%s: structuredContent %s: %v", what, b, err)
	}
	if resultText(r) == "" {
		t.Errorf("%s: no text content", what)
	}
	return out
}

// wantCode fails unless r is a tool error whose text starts with code.
func wantCode(t testing.TB, what string, r *mcp.CallToolResult, code string) string {
	t.Helper()
	text := resultText(r)
	if !r.IsError || !strings.HasPrefix(text, code+": ") {
		t.Fatalf("%s: got isError=%v %q, want %s", what, r.IsError, text, code)
	}
	if r.StructuredContent != nil {
		t.Errorf("%s: an error result carries structuredContent %v", what, r.StructuredContent)
	}
	return text
}

// directoryRoom is a list_local_rooms entry.
type directoryRoom = hubapi.DirectoryRoom

func listRooms(t testing.TB, cs *mcp.ClientSession) []directoryRoom {
	t.Helper()
	out := wantOK[struct {
		Rooms []directoryRoom `json:"rooms"`
	}](t, "list_local_rooms", tool(t, cs, "list_local_rooms", map[string]any{}))
	return out.Rooms
}

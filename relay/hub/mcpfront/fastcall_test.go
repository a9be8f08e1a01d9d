package mcpfront

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"reflect"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

// rpcAnswer posts body to the front with the given protocol version and
// returns the one JSON-RPC message it answered, decoded, whether it came
// as JSON or as a server-sent event.
func rpcAnswer(t *testing.T, url, token, version string, extra http.Header, body string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url+Path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	setHeaders(req, token)
	if version == "" {
		req.Header.Del("Mcp-Protocol-Version")
	} else {
		req.Header.Set("Mcp-Protocol-Version", version)
	}
	for k, v := range extra {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var raw []byte
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
				raw = []byte(d)
				break
			}
		}
	} else {
		var b bytes.Buffer
		b.ReadFrom(resp.Body)
		raw = b.Bytes()
	}
	var msg map[string]any
	if len(bytes.TrimSpace(raw)) > 0 {
		if err := json.Unmarshal(raw, &msg); err != nil {
			msg = map[string]any{"not json": string(raw)}
		}
	}
	return resp.StatusCode, msg
}

// TestFastCallAnswersAsTheSDK: a tools/call the front answers itself
// (fastcall.go) gets the JSON-RPC answer the go-sdk gives the same
// request, for every protocol version, for results and tool errors of
// device tools and list_local_rooms; anything the fast path does not take
// (wait_for_review, another member, a null id, a _meta claiming another
// version, a 2026-07-28 call without its headers) is left to the SDK.
func TestFastCallAnswersAsTheSDK(t *testing.T) {
	fh := startFront(t, Config{TokenRate: 100_000, TokenBurst: 100_000})
	call := func(id, params string) string {
		return fmt.Sprintf(`{"jsonrpc":"2.0","id":%s,"method":"tools/call","params":%s}`, id, params)
	}
	meta := func(v string) string {
		return fmt.Sprintf(`"_meta":{%q:%q,%q:{},%q:{"name":"t","version":"1"}}`, mcp.MetaKeyProtocolVersion, v, mcp.MetaKeyClientCapabilities, mcp.MetaKeyClientInfo)
	}
	newHeaders := func(name string) http.Header {
		return http.Header{"Mcp-Method": {"tools/call"}, "Mcp-Name": {name}}
	}
	cases := []struct {
		name, version string
		header        http.Header
		body          string
		fast          bool
	}{
		{"read_room", "2025-06-18", nil, call(`7`, `{"name":"read_room","arguments":{"room_id":"ok"}}`), true},
		{"string id", "2025-11-25", nil, call(`"a\u0062c"`, `{"name":"read_room","arguments":{"room_id":"ok"}}`), true},
		{"no version header", "", nil, call(`8`, `{"name":"read_room","arguments":{"room_id":"ok"}}`), true},
		{"device error", "2025-06-18", nil, call(`9`, `{"name":"read_room","arguments":{"room_id":"code-not_found"}}`), true},
		{"invalid args", "2025-06-18", nil, call(`10`, `{"name":"read_room","arguments":{"room_id":5}}`), true},
		{"list_local_rooms", "2025-06-18", nil, call(`11`, `{"name":"list_local_rooms","arguments":{},"_meta":{"progressToken":3}}`), true},
		{"new protocol", "2026-07-28", newHeaders("read_room"), call(`12`, `{"name":"read_room","arguments":{"room_id":"ok"},`+meta("2026-07-28")+`}`), true},
		{"new protocol, device error", "2026-07-28", newHeaders("read_room"), call(`13`, `{"name":"read_room","arguments":{"room_id":"code-busy"},`+meta("2026-07-28")+`}`), true},

		{"wait_for_review", "2025-06-18", nil, call(`20`, `{"name":"wait_for_review","arguments":{"proposal_id":"nope"}}`), false},
		{"unknown member", "2025-06-18", nil, call(`21`, `{"name":"read_room","arguments":{"room_id":"ok"},"extra":1}`), false},
		{"null id", "2025-06-18", nil, call(`null`, `{"name":"read_room","arguments":{"room_id":"ok"}}`), false},
		{"meta claims a version", "2025-06-18", nil, call(`22`, `{"name":"read_room","arguments":{"room_id":"ok"},`+meta("2026-07-28")+`}`), false},
		{"new protocol without headers", "2026-07-28", nil, call(`23`, `{"name":"read_room","arguments":{"room_id":"ok"},`+meta("2026-07-28")+`}`), false},
		{"new protocol, other name header", "2026-07-28", newHeaders("list_local_rooms"), call(`24`, `{"name":"read_room","arguments":{"room_id":"ok"},`+meta("2026-07-28")+`}`), false},
		{"new protocol without meta", "2026-07-28", newHeaders("read_room"), call(`25`, `{"name":"read_room","arguments":{"room_id":"ok"}}`), false},
		{"unknown tool", "2025-06-18", nil, call(`26`, `{"name":"nope","arguments":{}}`), false},
		// encoding/json would read these members in another case; the SDK does not.
		{"method in another case", "2025-06-18", nil, `{"jsonrpc":"2.0","id":27,"Method":"tools/call","params":{"name":"read_room","arguments":{"room_id":"ok"}}}`, false},
		{"params in another case", "2025-06-18", nil, `{"jsonrpc":"2.0","id":28,"method":"tools/call","PARAMS":{"name":"read_room","arguments":{"room_id":"ok"}}}`, false},
		{"name in another case", "2025-06-18", nil, call(`29`, `{"Name":"read_room","arguments":{"room_id":"ok"}}`), false},
		{"arguments in another case", "2025-06-18", nil, call(`30`, `{"name":"read_room","Arguments":{"room_id":"ok"}}`), false},
		{"escaped member name", "2025-06-18", nil, call(`31`, `{"n\u0061me":"read_room","arguments":{"room_id":"ok"}}`), false},
		{"meta names a version escaped", "2025-06-18", nil, call(`33`, `{"name":"read_room","arguments":{"room_id":"ok"},"_meta":{"io.modelcontextprotocol\/protocolVersion":"2026-07-28"}}`), false},
		{"meta not an object", "2025-06-18", nil, call(`34`, `{"name":"read_room","arguments":{"room_id":"ok"},"_meta":[1]}`), false},
		{"trailing value", "2025-06-18", nil, call(`35`, `{"name":"read_room","arguments":{"room_id":"ok"}}`) + ` 5`, false},
		{"new protocol, meta repeats a name", "2026-07-28", newHeaders("read_room"), call(`36`, `{"name":"read_room","arguments":{"room_id":"ok"},"_meta":{"io.modelcontextprotocol/protocolVersion":"2025-06-18",`+meta("2026-07-28")[9:]+`}`), true},
		{"spaced and nested", "2025-06-18", nil, " {\"jsonrpc\" : \"2.0\" ,\n\"id\":32, \"method\":\"tools/call\",\"params\":{ \"arguments\" : {\"room_id\":\"ok\"} , \"name\":\"read_room\",\"_meta\":{\"progressToken\":\"a}\\\"[\"}}} ", true},
	}
	for _, c := range cases {
		fh.front.sdkOnly.Store(true)
		sdkStatus, sdk := rpcAnswer(t, fh.url, fh.write, c.version, c.header, c.body)
		fh.front.sdkOnly.Store(false)
		before := fh.front.fastCalls.Load()
		status, got := rpcAnswer(t, fh.url, fh.write, c.version, c.header, c.body)
		if took := fh.front.fastCalls.Load() > before; took != c.fast {
			t.Errorf("%s: fast path taken %v, want %v", c.name, took, c.fast)
		}
		if status != sdkStatus || !reflect.DeepEqual(got, sdk) {
			t.Errorf("%s: answered %d %v\nthe SDK answers %d %v", c.name, status, got, sdkStatus, sdk)
		}
	}

	// The go-sdk client (2026-07-28) goes the fast way and reads its answers.
	before := fh.front.fastCalls.Load()
	cs := session(t, fh.url, fh.read)
	if isErr, text := callTool(t, cs, "read_room", map[string]any{"room_id": "ok"}); isErr {
		t.Fatalf("read_room: %s", text)
	}
	if isErr, text := callTool(t, cs, "read_room", map[string]any{"room_id": "code-device_offline"}); !isErr || !strings.HasPrefix(text, "device_offline") {
		t.Fatalf("read_room of an offline room: %v %s", isErr, text)
	}
	if n := fh.front.fastCalls.Load() - before; n != 2 {
		t.Errorf("the go-sdk client's 2 calls took the fast path %d times", n)
	}
	// And a client of an older version (the SDK's initialize handshake).
	c := mcp.NewClient(&mcp.Implementation{Name: "old", Version: "1"}, nil)
	old, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: fh.url + Path,
		HTTPClient: &http.Client{Transport: versionPin{"2025-06-18", hubclient.Bearer{Token: fh.read}}}}, nil)
	if err != nil {
		t.Fatalf("connect a 2025-06-18 client: %v", err)
	}
	defer old.Close()
	before = fh.front.fastCalls.Load()
	if isErr, text := callTool(t, old, "read_room", map[string]any{"room_id": "ok"}); isErr {
		t.Fatalf("read_room, 2025-06-18: %s", text)
	}
	if fh.front.fastCalls.Load() == before {
		t.Error("a 2025-06-18 client's call did not take the fast path")
	}
}

// versionPin sends every request with one protocol version header.
type versionPin struct {
	v    string
	next http.RoundTripper
}

func (p versionPin) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	if r.Header.Get("Mcp-Protocol-Version") != "" {
		r.Header.Set("Mcp-Protocol-Version", p.v)
	}
	return p.next.RoundTrip(r)
}

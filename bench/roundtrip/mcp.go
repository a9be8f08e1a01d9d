package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// mcpChain is read_room through the hub's MCP front, to the same hub and
// the same real agent as the full chain: the go-sdk client over stateless
// streamable HTTP with a read client token, so the front verifies the
// token and finds the room's device in the directory, as for a real MCP
// client. Each concurrent caller uses its own client session (a pool), as
// separate MCP clients would.
type mcpChain struct {
	client *mcp.Client
	tr     func() *mcp.StreamableClientTransport
	pool   chan *mcp.ClientSession
}

func (e *hubEnv) mcpClient(ctx context.Context, maxConc int) (*mcpChain, error) {
	tok, err := e.admin.CreateClientToken(ctx, project, hubapi.ScopeRead, "bench-mcp")
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Transport: hubclient.Bearer{Token: tok.Token, Base: pooled().Transport}}
	m := &mcpChain{
		client: mcp.NewClient(&mcp.Implementation{Name: "roomrelay-bench", Version: "bench"}, nil),
		tr: func() *mcp.StreamableClientTransport {
			return &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: hc}
		},
		pool: make(chan *mcp.ClientSession, maxConc),
	}
	// The room reaches the hub's directory with the agent's hello: wait
	// for the first call to find it.
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, code := m.call(ctx)
		if ok {
			return m, nil
		}
		if time.Now().After(deadline) {
			m.close()
			return nil, fmt.Errorf("mcp chain: read_room never succeeded (last: %s)", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (m *mcpChain) session(ctx context.Context) (*mcp.ClientSession, error) {
	select {
	case cs := <-m.pool:
		return cs, nil
	default:
	}
	cs, err := m.client.Connect(ctx, m.tr(), nil)
	if err != nil {
		return nil, err
	}
	return cs, nil
}

func (m *mcpChain) call(ctx context.Context) (bool, string) {
	cs, err := m.session(ctx)
	if err != nil {
		return false, "transport"
	}
	defer func() {
		select {
		case m.pool <- cs:
		default:
			cs.Close()
		}
	}()
	r, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: relay.CmdReadRoom, Arguments: map[string]any{"room_id": "room-1"}})
	if err != nil {
		return false, "transport"
	}
	if r.IsError {
		text := ""
		if len(r.Content) > 0 {
			if tc, ok := r.Content[0].(*mcp.TextContent); ok {
				text = tc.Text
			}
		}
		return false, firstWord(text)
	}
	return true, ""
}

// firstWord is a tool error's code: its text starts with it.
func firstWord(s string) string {
	for i, c := range s {
		if c == ':' || c == ' ' {
			return s[:i]
		}
	}
	return s
}

func (m *mcpChain) close() {
	for {
		select {
		case cs := <-m.pool:
			cs.Close()
		default:
			return
		}
	}
}

// mcpThinChain is the same MCP tools/call as the mcp chain, sent as a
// plain HTTP POST (a thin MCP client): the go-sdk client's own request,
// recorded once at start (headers and body, the JSON-RPC id replaced per
// call), and its answer decoded into a struct, as the HTTP API's client
// decodes its own. Beside the mcp chain it tells the client library's cost
// from the hub's: the hub does the same work for both.
type mcpThinChain struct {
	hc     *http.Client
	url    string
	header http.Header
	rest   []byte // the recorded body without its id, from its first member on
	id     atomic.Int64
}

func (e *hubEnv) mcpThinClient(ctx context.Context) (*mcpThinChain, error) {
	tok, err := e.admin.CreateClientToken(ctx, project, hubapi.ScopeRead, "bench-mcp-thin")
	if err != nil {
		return nil, err
	}
	// Record what the go-sdk client sends for read_room.
	rec := &recordCall{next: hubclient.Bearer{Token: tok.Token, Base: pooled().Transport}}
	m := &mcpChain{
		client: mcp.NewClient(&mcp.Implementation{Name: "roomrelay-bench", Version: "bench"}, nil),
		tr: func() *mcp.StreamableClientTransport {
			return &mcp.StreamableClientTransport{Endpoint: e.url + "/mcp", HTTPClient: &http.Client{Transport: rec}}
		},
		pool: make(chan *mcp.ClientSession, 1),
	}
	// The room reaches the hub's directory with the agent's hello: wait
	// for the first call to find it.
	deadline := time.Now().Add(30 * time.Second)
	for ok, code := m.call(ctx); !ok; ok, code = m.call(ctx) {
		if time.Now().After(deadline) {
			m.close()
			return nil, fmt.Errorf("mcp-thin chain: read_room never succeeded (last: %s)", code)
		}
		time.Sleep(20 * time.Millisecond)
	}
	m.close()
	if rec.req == nil {
		return nil, errors.New("mcp-thin chain: the go-sdk client's tools/call was not recorded")
	}
	var msg map[string]json.RawMessage
	if err := json.Unmarshal(rec.body, &msg); err != nil {
		return nil, fmt.Errorf("mcp-thin chain: the recorded call: %w", err)
	}
	delete(msg, "id")
	rest, _ := json.Marshal(msg)
	t := &mcpThinChain{hc: &http.Client{Transport: hubclient.Bearer{Token: tok.Token, Base: pooled().Transport}},
		url: rec.req.URL.String(), header: rec.req.Header.Clone(), rest: rest[1:]}
	t.header.Del("Authorization") // the Bearer transport sets it
	if ok, code := t.call(ctx); !ok {
		return nil, fmt.Errorf("mcp-thin chain: the recorded call replayed: %s", code)
	}
	return t, nil
}

func (t *mcpThinChain) call(ctx context.Context) (bool, string) {
	body := append(strconv.AppendInt([]byte(`{"id":`), t.id.Add(1), 10), ',')
	body = append(body, t.rest...)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.url, bytes.NewReader(body))
	if err != nil {
		return false, "transport"
	}
	req.Header = t.header.Clone()
	resp, err := t.hc.Do(req)
	if err != nil {
		return false, "transport"
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return false, "transport"
	}
	if strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") { // the SDK's answer, when the front leaves a call to it
		for line := range strings.Lines(string(raw)) {
			if d, ok := strings.CutPrefix(line, "data: "); ok {
				raw = []byte(d)
				break
			}
		}
	}
	var answer struct {
		Result *struct {
			IsError           bool            `json:"isError"`
			StructuredContent json.RawMessage `json:"structuredContent"`
			Content           []struct {
				Text string `json:"text"`
			} `json:"content"`
		} `json:"result"`
	}
	if json.Unmarshal(raw, &answer) != nil || answer.Result == nil {
		return false, "transport"
	}
	if answer.Result.IsError {
		text := ""
		if len(answer.Result.Content) > 0 {
			text = answer.Result.Content[0].Text
		}
		return false, firstWord(text)
	}
	return true, ""
}

func (t *mcpThinChain) close() { t.hc.CloseIdleConnections() }

// recordCall keeps the first tools/call request it carries.
type recordCall struct {
	next http.RoundTripper
	mu   sync.Mutex
	req  *http.Request
	body []byte
}

func (r *recordCall) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil {
		b, err := io.ReadAll(req.Body)
		req.Body.Close()
		if err != nil {
			return nil, err
		}
		req.Body = io.NopCloser(bytes.NewReader(b))
		r.mu.Lock()
		if r.req == nil && bytes.Contains(b, []byte(`"tools/call"`)) {
			r.req, r.body = req.Clone(context.Background()), b
		}
		r.mu.Unlock()
	}
	return r.next.RoundTrip(req)
}

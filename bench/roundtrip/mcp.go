package main

import (
	"context"
	"fmt"
	"net/http"
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

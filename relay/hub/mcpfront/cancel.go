package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Cancellation of a tools/call reaches the device (the hub's cancel frame)
// in two ways, neither of which the go-sdk gives a stateless server with
// the protocol versions clients speak today (it detaches the handler from
// the HTTP request, and a notifications/cancelled in a POST of its own
// finds no call in its one-request session):
//
//   - the HTTP request ends (the client closed it): guard gives every POST
//     a context that ends with it, and withCallContext ties each tool
//     handler's context to it;
//   - the client sends notifications/cancelled naming the request's
//     JSON-RPC id: guard keeps each single-call POST in this node's
//     registry under (token, id) and, on the notification, cancels that
//     key here and broadcasts it to every node (hub.BroadcastCallCancel),
//     whose registry cancels it there.
//
// A key is per token: another caller naming the same id cancels nothing.

// maxInflight bounds the registry; past it a call is still cancelled when
// its HTTP request ends, just not by a notification.
const maxInflight = 10_000

// maxRequestIDBytes bounds a JSON-RPC id the registry keeps.
const maxRequestIDBytes = 200

type callCtxKey struct{}

// inflight is this node's registry of running tools/call POSTs.
type inflight struct {
	mu    sync.Mutex
	calls map[string][]*context.CancelFunc
	n     int
}

// callKey is the registry key of a token's JSON-RPC id ("" when the id
// cannot be one: absent, null, too long).
func callKey(token string, id json.RawMessage) string {
	var c bytes.Buffer
	if json.Compact(&c, id) != nil || c.Len() == 0 || c.Len() > maxRequestIDBytes || c.String() == "null" {
		return ""
	}
	return token + "\n" + c.String()
}

// add keeps cancel under key until remove is called; false when full.
func (r *inflight) add(key string, cancel context.CancelFunc) (remove func(), ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n >= maxInflight {
		return nil, false
	}
	if r.calls == nil {
		r.calls = map[string][]*context.CancelFunc{}
	}
	p := &cancel
	r.calls[key] = append(r.calls[key], p)
	r.n++
	return func() {
		r.mu.Lock()
		defer r.mu.Unlock()
		l := r.calls[key]
		for i, q := range l {
			if q == p {
				l = append(l[:i], l[i+1:]...)
				r.n--
				break
			}
		}
		if len(l) == 0 {
			delete(r.calls, key)
		} else {
			r.calls[key] = l
		}
	}, true
}

// cancel cancels every call kept under key (two clients of one token may
// reuse an id; both are that token's).
func (r *inflight) cancel(key string) {
	r.mu.Lock()
	l := append([]*context.CancelFunc(nil), r.calls[key]...)
	r.mu.Unlock()
	for _, c := range l {
		(*c)()
	}
}

// cancelCall is a token's notifications/cancelled: its call on this node
// at once, and on the others through the hub.
func (f *Front) cancelCall(token string, requestID json.RawMessage) {
	key := callKey(token, requestID)
	if key == "" {
		return
	}
	f.calls.cancel(key)
	if err := f.hub.BroadcastCallCancel(key); err != nil {
		f.log.Warn("broadcast a call cancel", "err", err)
	}
}

// withCallContext ties a tool handler's context to its POST's (see above).
func withCallContext(h mcp.ToolHandler) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		if rc, ok := ctx.Value(callCtxKey{}).(context.Context); ok {
			c, cancel := context.WithCancel(ctx)
			defer cancel()
			defer context.AfterFunc(rc, cancel)()
			ctx = c
		}
		return h(ctx, req)
	}
}

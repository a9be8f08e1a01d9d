package mcpfront

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"

	"github.com/roomrelay/roomrelay/relay"
)

// Bounds of one POST to /mcp, checked before the go-sdk sees it: the SDK
// answers every message of a JSON-RPC batch on a goroutine of its own and
// holds every answer until the client reads them, so one 4 MB batch of
// tools/list held hundreds of MB and tens of thousands of goroutines.
const (
	// MaxBatch is the most JSON-RPC messages one POST may carry. MCP
	// 2025-06-18 dropped batches; older clients send a few at most.
	MaxBatch = 8
	// MaxBodyBytes bounds a POST body: a device command's arguments travel
	// in one frame of at most relay.DefaultMaxFrame (1 MiB).
	MaxBodyBytes = 2 << 20
)

// guard is the front's request rules in front of the go-sdk handler, after
// authentication: the Host rule that replaces the SDK's DNS-rebinding
// check (hostAllowed), the body and batch bounds, and the per-token
// limit for every message a token sends. tools/call of a known tool is
// counted by the tool itself (begin), where a refusal is a tool error the
// model can read; every other message is counted here.
func (f *Front) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !f.hostAllowed(r) {
			http.Error(w, fmt.Sprintf("Forbidden: Host %q on a loopback connection: only loopback names are served here, or the hub's --public-url host through a --trusted-proxy (DNS-rebinding rule)", r.Host), http.StatusForbidden)
			return
		}
		if r.Method != http.MethodPost {
			next.ServeHTTP(w, r)
			return
		}
		body, err := readBody(w, r)
		if err != nil {
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				rpcError(w, http.StatusRequestEntityTooLarge, -32600, fmt.Sprintf("a request body carries at most %d bytes (body bound)", MaxBodyBytes))
				return
			}
			http.Error(w, "reading the request body: "+err.Error(), http.StatusBadRequest)
			return
		}
		n, counted, heads, err := f.countMessages(body)
		if err != nil {
			rpcError(w, http.StatusBadRequest, -32700, "malformed JSON-RPC payload: "+err.Error())
			return
		}
		if n > MaxBatch {
			rpcError(w, http.StatusBadRequest, -32600, fmt.Sprintf("a JSON-RPC batch carries at most %d messages, this one %d (batch bound): send them in separate requests", MaxBatch, n))
			return
		}
		id := ""
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			id = ti.UserID
		}
		if counted > 0 {
			if ok, wait := f.lim.allowN(id, counted); !ok {
				secs := int((wait + time.Second - 1) / time.Second)
				w.Header().Set("Retry-After", strconv.Itoa(secs))
				rpcError(w, relay.CodeRateLimited.HTTPStatus(), -32000, fmt.Sprintf("rate_limited: this token sent more than %d messages a minute to this hub; retry in %ds (retry_after_seconds=%d)", f.cfg.TokenRate, secs, secs))
				return
			}
		}
		// Cancellation (cancel.go): the request's context ends with the
		// POST or with a notifications/cancelled naming its one call.
		for _, h := range heads {
			if h.Method == "notifications/cancelled" {
				f.cancelCall(id, h.Params.RequestID)
			}
		}
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		oneCall := n == 1 && heads[0].Method == "tools/call"
		if oneCall {
			if key := callKey(id, heads[0].ID); key != "" {
				if remove, ok := f.calls.add(key, cancel); ok {
					defer remove()
				}
			}
		}
		r = r.WithContext(context.WithValue(ctx, callCtxKey{}, ctx))
		if oneCall && !f.sdkOnly.Load() && f.fastCall(w, r, body) {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		r.ContentLength = int64(len(body))
		next.ServeHTTP(w, r)
	})
}

// presizeMax bounds the buffer a POST's Content-Length reserves before
// its bytes arrive: a claim costs the hub no more than this.
const presizeMax = 64 << 10

// readBody reads a POST body of at most MaxBodyBytes, into one buffer of
// its announced size when it announces one (io.ReadAll grows from 512
// bytes, copying as it goes).
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, error) {
	body := http.MaxBytesReader(w, r.Body, MaxBodyBytes)
	if n := r.ContentLength; n > 0 && n <= presizeMax {
		var b bytes.Buffer
		b.Grow(int(n) + bytes.MinRead) // ReadFrom wants MinRead free to not grow before it sees EOF
		_, err := b.ReadFrom(body)
		return b.Bytes(), err
	}
	return io.ReadAll(body)
}

// msgHead is what the guard reads of each JSON-RPC message.
type msgHead struct {
	Method string          `json:"method"`
	ID     json.RawMessage `json:"id"`
	Params struct {
		Name      string          `json:"name"`      // tools/call
		RequestID json.RawMessage `json:"requestId"` // notifications/cancelled
	} `json:"params"`
}

// countMessages reads a POST body: how many JSON-RPC messages it carries,
// how many of them the guard counts against the token (all but tools/call
// of a known tool), and their heads. It reads at most MaxBatch+1 messages'
// heads.
func (f *Front) countMessages(body []byte) (n, counted int, heads []msgHead, err error) {
	body = bytes.TrimSpace(body)
	msgs := []json.RawMessage{body}
	if len(body) > 0 && body[0] == '[' {
		msgs = nil
		if err := json.Unmarshal(body, &msgs); err != nil {
			return 0, 0, nil, err
		}
		if len(msgs) == 0 {
			return 0, 0, nil, errors.New("empty batch")
		}
		if len(msgs) > MaxBatch {
			return len(msgs), 0, nil, nil
		}
	}
	heads = make([]msgHead, len(msgs))
	for i, m := range msgs {
		_ = json.Unmarshal(m, &heads[i]) // a malformed message still counts; the SDK refuses it
		if heads[i].Method == "tools/call" && f.tools[heads[i].Params.Name] {
			continue
		}
		counted++
	}
	return len(msgs), counted, heads, nil
}

// rpcError answers with a JSON-RPC error (id null: it may stand for a
// whole batch).
func rpcError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(rpcErrorBody(nil, code, msg), '\n'))
}

// rpcErrorBody is a JSON-RPC error response for id (null when nil).
func rpcErrorBody(id json.RawMessage, code int, msg string) []byte {
	b, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id, "error": map[string]any{"code": code, "message": msg}})
	return b
}

// hostAllowed is the DNS-rebinding rule: a request that reached a loopback
// socket with a non-loopback Host is a browser tricked by a rebound name,
// unless it is the hub's own reverse proxy on this host forwarding the
// public Host: a trusted proxy peer, and the Host of --public-url. (The
// go-sdk's own check refuses that proxy too, so it is disabled in New.)
func (f *Front) hostAllowed(r *http.Request) bool {
	local, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok || local == nil || !loopback(local.String()) || loopback(r.Host) {
		return true
	}
	return f.publicHost != "" && f.hub.FromTrustedProxy(r) && strings.EqualFold(hostname(r.Host), f.publicHost)
}

// loopback reports whether addr (host, host:port or [v6]:port) names a
// loopback address or localhost.
func loopback(addr string) bool {
	h := hostname(addr)
	if strings.EqualFold(h, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && a.Unmap().IsLoopback()
}

// hostname is addr without its port and brackets.
func hostname(addr string) string {
	if h, _, err := net.SplitHostPort(addr); err == nil {
		return h
	}
	return strings.Trim(addr, "[]")
}

// publicHostOf is the host name of a public URL ("" when there is none).
func publicHostOf(public string) string {
	u, err := url.Parse(public)
	if public == "" || err != nil {
		return ""
	}
	return u.Hostname()
}

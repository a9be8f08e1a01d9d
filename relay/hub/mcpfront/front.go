// Package mcpfront is the hub's MCP server: the seed's room tools, served to
// AI coding agents (Claude Code and other MCP clients) over streamable HTTP
// at {hub}/mcp, stateless, built on the go-sdk. It takes a *hub.Hub and
// uses only the hub's Go API: a client token names a project, every tool
// that takes room_id finds the room's device in the hub's room directory,
// and the device decides every command itself, as for the HTTP API.
//
// Authentication is a bearer token, its verifier picked by prefix: a
// client token (rrc_, `roomrelay hub token create`) or, when Config.OAuth
// is set, an OAuth access token of the hub's authorization server
// (relay/hub/oauth). Without a valid one /mcp answers 401 with a
// WWW-Authenticate header that points at the RFC 9728 metadata under
// /.well-known/oauth-protected-resource/mcp, which names the authorization
// server when there is one.
//
// A POST carrying one plain tools/call of a tool that needs no session is
// answered by the front itself, with the answer the go-sdk gives the same
// request, without the SDK's per-request session (fastcall.go); every other
// message goes to the SDK.
package mcpfront

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/internal/keyrate"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Paths the front serves.
const (
	Path         = "/mcp"
	MetadataPath = "/.well-known/oauth-protected-resource/mcp"
	// RootMetadataPath is also served when OAuth is on: clients that do not
	// read the challenge try the root (RFC 9728 §3.1).
	RootMetadataPath = "/.well-known/oauth-protected-resource"
)

// OAuth verifies OAuth access tokens (relay/hub/oauth.Server).
type OAuth interface {
	// Issuer is the authorization server's issuer, listed in the metadata.
	Issuer() string
	// VerifyAccess returns who the token speaks for, or
	// hub.ErrBadClientToken.
	VerifyAccess(ctx context.Context, token string) (*hub.Client, error)
}

// Config configures the front. Zero values take the defaults.
type Config struct {
	Hub *hub.Hub
	// PublicURL is the hub's base URL as clients reach it
	// ("https://hub.example.com"); empty derives it from each request's
	// Host (and X-Forwarded-Proto only from the hub's trusted proxies).
	PublicURL string
	// OAuth, when set, verifies rro_ access tokens; PublicURL is then
	// required (the resource never derives from a request).
	OAuth OAuth
	// TokenRate and TokenBurst bound the JSON-RPC messages (tools/call,
	// tools/list, initialize, ...) per client token on this node (default
	// 300 per minute, burst 60).
	TokenRate  int
	TokenBurst int
	// ProgressEvery is the interval of wait_for_review's progress
	// notifications (default 10 s).
	ProgressEvery time.Duration
	// CommandTimeout bounds one device command (default 30 s).
	CommandTimeout time.Duration
	// Version is the server version in initialize (default "dev").
	Version string
	Logger  *slog.Logger
	Now     func() time.Time
}

// Front serves the MCP tools.
type Front struct {
	cfg    Config
	hub    *hub.Hub
	log    *slog.Logger
	server *mcp.Server
	mcp    http.Handler
	lim    *tokenLimiter
	// tools are the registered tool names: the guard counts tools/call of
	// any other name itself.
	tools    map[string]bool
	toolList []*mcp.Tool // in registration order
	// fast are the tools fastCall serves without the SDK (fastcall.go),
	// their handlers as added (addTool); fastCalls counts the calls it served.
	fast      map[string]mcp.ToolHandler
	fastCalls atomic.Int64
	impl      *mcp.Implementation // the server's name and version
	sdkOnly   atomic.Bool         // tests: every call through the SDK, to compare
	calls     inflight            // running tools/call POSTs of this node (cancel.go)
	// publicHost is PublicURL's host name (guard.go's Host rule).
	publicHost string
}

// New builds the front; Handler serves it.
func New(cfg Config) (*Front, error) {
	if cfg.Hub == nil {
		return nil, errors.New("mcpfront: Config.Hub is required")
	}
	if cfg.TokenRate <= 0 {
		cfg.TokenRate = 300
	}
	if cfg.TokenBurst <= 0 {
		cfg.TokenBurst = 60
	}
	if cfg.ProgressEvery <= 0 {
		cfg.ProgressEvery = 10 * time.Second
	}
	if cfg.CommandTimeout <= 0 {
		cfg.CommandTimeout = 30 * time.Second
	}
	if cfg.Version == "" {
		cfg.Version = "dev"
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.PublicURL = strings.TrimRight(cfg.PublicURL, "/")
	if cfg.OAuth != nil && cfg.PublicURL == "" {
		return nil, errors.New("mcpfront: OAuth needs PublicURL: the canonical resource must not derive from a request's Host")
	}
	f := &Front{cfg: cfg, hub: cfg.Hub, log: cfg.Logger.With("component", "mcp"),
		lim: newTokenLimiter(cfg.TokenRate, cfg.TokenBurst, cfg.Now), tools: map[string]bool{}, fast: map[string]mcp.ToolHandler{}, publicHost: publicHostOf(cfg.PublicURL)}
	f.impl = &mcp.Implementation{Name: "roomrelay", Version: cfg.Version}
	f.server = mcp.NewServer(f.impl, &mcp.ServerOptions{
		Instructions: instructions,
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: false}},
		Logger:       sdkLogger(f.log),
	})
	cfg.Hub.OnCallCancel(f.calls.cancel)
	if err := f.addTools(); err != nil {
		return nil, err
	}
	streamable := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return f.server },
		&mcp.StreamableHTTPOptions{Stateless: true, Logger: sdkLogger(f.log), MaxRequestBodyBytes: MaxBodyBytes,
			DisableLocalhostProtection: true}) // guard.go's hostAllowed is the rule, which lets the trusted proxy through
	guarded := f.guard(streamable)
	// The token was verified by f.authenticate; this hands it to go-sdk so
	// tool handlers find it in req.Extra.TokenInfo.
	f.mcp = auth.RequireBearerToken(func(ctx context.Context, _ string, r *http.Request) (*auth.TokenInfo, error) {
		if ti, ok := r.Context().Value(tokenInfoKey{}).(*auth.TokenInfo); ok {
			return ti, nil
		}
		return nil, auth.ErrInvalidToken
	}, &auth.RequireBearerTokenOptions{AllowMissingExpiration: true})(guarded)
	return f, nil
}

const instructions = "roomrelay reaches local Rooms: Rooms kept by a desktop app on one laptop, through an agent the owner runs there. " +
	"Start with list_local_rooms. A local Room is reachable only while its laptop is online; when a call fails with device_offline " +
	"(or app_not_running: the laptop is online but its desktop app is closed), tell the user instead of retrying. Proposals wait for the owner's approval on that laptop (`roomrelay review`)."

// Mount registers the front's two paths on mux, wrapped by the hub's Track
// (so they follow its readiness and shutdown).
func (f *Front) Mount(mux *http.ServeMux) {
	h := f.hub.Track(f.Handler())
	mux.Handle(Path, h)
	mux.Handle(MetadataPath, h)
	if f.cfg.OAuth != nil {
		mux.Handle(RootMetadataPath, h)
	}
}

// Handler serves Path (the MCP endpoint) and MetadataPath (RFC 9728).
func (f *Front) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case MetadataPath:
			f.serveMetadata(w, r)
		case RootMetadataPath:
			if f.cfg.OAuth == nil {
				http.NotFound(w, r)
				return
			}
			f.serveMetadata(w, r)
		case Path:
			f.authenticate(w, r)
		default:
			http.NotFound(w, r)
		}
	})
}

type tokenInfoKey struct{}

// base is the hub's public base URL for this request.
func (f *Front) base(r *http.Request) string {
	if f.cfg.PublicURL != "" {
		return f.cfg.PublicURL
	}
	scheme := "http"
	if r.TLS != nil || (f.hub.FromTrustedProxy(r) && strings.EqualFold(r.Header.Get("X-Forwarded-Proto"), "https")) {
		scheme = "https"
	}
	return scheme + "://" + r.Host
}

// serveMetadata answers the RFC 9728 protected resource metadata.
func (f *Front) serveMetadata(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	b := f.base(r)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "max-age=300")
	w.Header().Set("Access-Control-Allow-Origin", "*")
	as := ""
	if f.cfg.OAuth != nil {
		as = fmt.Sprintf(`,"authorization_servers":[%q]`, f.cfg.OAuth.Issuer())
	}
	fmt.Fprintf(w, `{"resource":%q,"resource_name":"roomrelay local rooms","scopes_supported":[%q,%q],"bearer_methods_supported":["header"]%s}`+"\n",
		b+Path, hubapi.OAuthScopeRead, hubapi.OAuthScopeWrite, as)
}

// authenticate checks the bearer client token and passes the request on to
// the MCP handler with the token's identity, or answers 401.
func (f *Front) authenticate(w http.ResponseWriter, r *http.Request) {
	// The challenge, built only for a refusal (every request pays for what
	// runs before the tool).
	challenge := func() string {
		meta := fmt.Sprintf(`Bearer resource_metadata=%q`, f.base(r)+MetadataPath)
		if f.cfg.OAuth != nil {
			meta += fmt.Sprintf(`, scope="%s %s"`, hubapi.OAuthScopeRead, hubapi.OAuthScopeWrite)
		}
		return meta
	}
	client := f.hub.ClientAddr(r) // behind a trusted proxy, the address it forwarded
	tok := ""
	if a := r.Header.Get("Authorization"); len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		tok = strings.TrimSpace(a[7:])
	}
	if tok == "" && f.cfg.OAuth != nil {
		w.Header().Set("WWW-Authenticate", challenge())
		http.Error(w, "Connect roomrelay to continue: sign in through your MCP client (OAuth), or send a client token: Authorization: Bearer <token> (`roomrelay hub token create`)", http.StatusUnauthorized)
		return
	}
	if tok == "" {
		w.Header().Set("WWW-Authenticate", challenge())
		http.Error(w, "this MCP endpoint needs a roomrelay client token: Authorization: Bearer <token> (`roomrelay hub token create`)", http.StatusUnauthorized)
		return
	}
	verify := f.hub.VerifyClientToken
	if f.cfg.OAuth != nil && strings.HasPrefix(tok, hubapi.PrefixOAuthAccess) {
		verify = f.cfg.OAuth.VerifyAccess
	}
	c, err := verify(r.Context(), tok)
	if errors.Is(err, hub.ErrBadClientToken) {
		f.log.Info("refused a client token", "client", client)
		w.Header().Set("WWW-Authenticate", challenge()+`, error="invalid_token", error_description="unknown or revoked token"`)
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	if err != nil {
		f.log.Error("verify client token", "err", err)
		http.Error(w, "the hub could not check the token; retry", hubapi.Status(hubapi.CodeUnavailable))
		return
	}
	scopes := []string{hubapi.OAuthScopeRead}
	if c.CanWrite() {
		scopes = append(scopes, hubapi.OAuthScopeWrite)
	}
	ti := &auth.TokenInfo{Scopes: scopes, UserID: c.TokenID, Extra: map[string]any{"client": c, "addr": client}}
	// A call may wait for the owner (wait_for_review) or a device command:
	// past the server's WriteTimeout.
	_ = http.NewResponseController(w).SetWriteDeadline(time.Now().Add(time.Duration(MaxWaitSeconds)*time.Second + f.cfg.CommandTimeout + 10*time.Second))
	f.mcp.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), tokenInfoKey{}, ti)))
}

// tokenLimiter is a token bucket per client token (this node only).
type tokenLimiter struct {
	rate    keyrate.Rate
	buckets *keyrate.Buckets
}

func newTokenLimiter(perMin, burst int, now func() time.Time) *tokenLimiter {
	return &tokenLimiter{rate: keyrate.Per(perMin, time.Minute, burst), buckets: keyrate.New(10_000, now)}
}

// allow takes one call from id's bucket, or says how long to wait.
func (l *tokenLimiter) allow(id string) (bool, time.Duration) { return l.allowN(id, 1) }

// allowN takes n calls from id's bucket, all or none, or says how long to
// wait for them.
func (l *tokenLimiter) allowN(id string, n int) (bool, time.Duration) {
	return l.buckets.Take(id, l.rate, n)
}

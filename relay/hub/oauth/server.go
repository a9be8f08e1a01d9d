// Package oauth is the hub's OAuth 2.1 authorization server for its MCP
// front: `claude mcp add --transport http roomrelay https://HUB/mcp` with no
// pasted token. The hub is issuer and resource server; the issuer and the
// canonical resource ({PublicURL}/mcp) come from configuration, never from
// a request's Host or forwarded headers.
//
// It serves RFC 8414 metadata, RFC 7591 registration (public clients,
// loopback / known custom-scheme / operator-allowed HTTPS redirects),
// authorization code with S256 PKCE only, RFC 8707 resource indicators,
// the RFC 9207 iss parameter, refresh-token rotation with a short reuse
// grace, and RFC 7009 revocation. A person approves each client: an
// approver signed in with an operator-issued one-time login link, or the
// owner of an enrolled device with `roomrelay oauth approve CODE` (the
// grant is then bound to that device).
//
// Tokens are opaque, prefixed (rro_ access, rrf_ refresh, rrz_ code, rrl_
// login link, distinct from rrc_ client tokens) and stored only as
// SHA-256 hashes in the hub's rr_oauth_* buckets. Every access is checked
// against the store, so a revoked grant stops at its next request on every
// node. Written on the standard library: no authorization-server library
// fits (docs/oauth.md, "Why no library").
package oauth

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/x509"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Token prefixes. The MCP front picks its verifier by prefix; the access
// token's prefix is hubapi's, the one the front reads.
const (
	PrefixAccess  = hubapi.PrefixOAuthAccess
	PrefixRefresh = "rrf_"
	PrefixCode    = "rrz_"
	PrefixLogin   = "rrl_"
	prefixSession = "rrs_"
)

// The scopes as MCP clients see them (hubapi's); write implies read.
const (
	ScopeRead  = hubapi.OAuthScopeRead
	ScopeWrite = hubapi.OAuthScopeWrite
)

// Paths the server answers.
const (
	PathASMetadata   = "/.well-known/oauth-authorization-server"
	PathRegister     = "/oauth/register"
	PathAuthorize    = "/oauth/authorize"
	PathDecision     = "/oauth/authorize/decision"
	PathWait         = "/oauth/authorize/wait"
	PathLogin        = "/oauth/login"
	PathToken        = "/oauth/token"
	PathRevoke       = "/oauth/revoke"
	PathDeviceApprov = "/v1/oauth/device-approvals/"
)

// Config configures the server. Zero values take the defaults.
type Config struct {
	Hub *hub.Hub
	// Store keeps the server's records (default: the hub's JetStream
	// buckets, NewJetStreamStore).
	Store Store
	// PublicURL is the hub's base URL as clients reach it, scheme and host
	// only ("https://hub.example.com"). Required: it is the issuer.
	PublicURL string
	// ResourcePath is the MCP endpoint's path (default "/mcp").
	ResourcePath string
	// AccessTTL is an access token's lifetime (default 1 h).
	AccessTTL time.Duration
	// RefreshTTL is how long an unused refresh token lives (default 30 d;
	// at most 90 d, the grants bucket's age).
	RefreshTTL time.Duration
	// RefreshGrace is how long a rotated refresh token still works (default
	// 2 min): clients race their own refreshes. A later reuse revokes the
	// grant.
	RefreshGrace time.Duration
	// CodeTTL is an authorization code's lifetime (default 60 s).
	CodeTTL time.Duration
	// RequestTTL is how long a consent page (and its device code) stays
	// valid (default 5 min).
	RequestTTL time.Duration
	// LoginTTL is an approver login link's lifetime (default 15 min);
	// SessionTTL an approver's browser session (default 12 h).
	LoginTTL   time.Duration
	SessionTTL time.Duration
	// RedirectHosts are the HTTPS hosts a registered client may redirect to
	// (default DefaultRedirectHosts). Loopback http and the known custom
	// schemes are always allowed.
	RedirectHosts []string
	// RegisterRate bounds registrations per client address and minute on
	// this node (default 20).
	RegisterRate int
	// CIMDHosts turns client ID metadata documents on for these hosts: a
	// client_id that is an https URL on one of them is fetched (cimd.go).
	// Empty: off, and not advertised.
	CIMDHosts []string
	Logger    *slog.Logger
	Now       func() time.Time

	// Tests only: the CA of an httptest TLS server, and leave its loopback
	// address reachable.
	cimdRoots        *x509.CertPool
	cimdAllowPrivate bool
	cimdTimeout      time.Duration
}

// DefaultRedirectHosts are the web clients' callback hosts: VS Code for the
// web and Claude's connectors.
var DefaultRedirectHosts = []string{"vscode.dev", "insiders.vscode.dev", "claude.ai", "claude.com"}

// Server is the authorization server.
type Server struct {
	cfg      Config
	hub      *hub.Hub
	st       Store
	log      *slog.Logger
	issuer   string       // PublicURL
	resource string       // issuer + ResourcePath
	secure   bool         // https issuer: __Host- cookies with Secure
	regLim   *rateLimiter // registrations per client prefix
	regAggr  *rateLimiter // … and per aggregate
	revLim   *rateLimiter // revocations per client prefix
	tokLim   *rateLimiter // token requests per client prefix
	grantLim *rateLimiter // refreshes per grant
	authLim  *rateLimiter // consent pages per client prefix
	logs     *logLimiter  // lines a stranger's request can cause
	evictor  clientEvictor
	pending  *pendingIndex // this node's unacted consent pages
	m        *metrics
	cimd     *cimdFetcher // nil: CIMD off
	guesses  *guessGuard  // device-approval code guessing (guess.go)
}

// New checks cfg and returns the server; Mount serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Hub == nil {
		return nil, errors.New("oauth: Config.Hub is required")
	}
	iss, err := checkPublicURL(cfg.PublicURL)
	if err != nil {
		return nil, err
	}
	if cfg.ResourcePath == "" {
		cfg.ResourcePath = "/mcp"
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d <= 0 {
			*d = v
		}
	}
	def(&cfg.AccessTTL, time.Hour)
	def(&cfg.RefreshTTL, 30*24*time.Hour)
	def(&cfg.RefreshGrace, 2*time.Minute)
	def(&cfg.CodeTTL, time.Minute)
	def(&cfg.RequestTTL, 5*time.Minute)
	def(&cfg.LoginTTL, 15*time.Minute)
	def(&cfg.SessionTTL, 12*time.Hour)
	if cfg.RefreshTTL > 90*24*time.Hour {
		return nil, errors.New("oauth: the refresh token lifetime is at most 90 days (the grants bucket keeps an idle grant that long)")
	}
	if cfg.RequestTTL > 15*time.Minute || cfg.LoginTTL > 15*time.Minute || cfg.CodeTTL > 10*time.Minute {
		return nil, errors.New("oauth: requests, login links and codes live at most 15 minutes (the flow bucket's age is 30)")
	}
	if cfg.RedirectHosts == nil {
		cfg.RedirectHosts = DefaultRedirectHosts
	}
	if cfg.RegisterRate <= 0 {
		cfg.RegisterRate = 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Store == nil {
		cfg.Store = NewJetStreamStore(cfg.Hub)
	}
	s := &Server{cfg: cfg, hub: cfg.Hub, st: cfg.Store, log: cfg.Logger.With("component", "oauth"), issuer: iss,
		resource: iss + cfg.ResourcePath, secure: strings.HasPrefix(iss, "https://"),
		regLim:   newRateLimiter(cfg.RegisterRate, time.Minute, cfg.Now),
		regAggr:  newRateLimiter(registerPerAggr*cfg.RegisterRate, time.Minute, cfg.Now),
		revLim:   newRateLimiter(revokePerPrefix, time.Minute, cfg.Now),
		tokLim:   newRateLimiter(tokenPerPrefix, time.Minute, cfg.Now),
		grantLim: newRateLimiter(tokenPerGrant, time.Minute, cfg.Now),
		authLim:  newRateLimiter(authorizePerPrefx, time.Minute, cfg.Now),
		guesses:  newGuessGuard(cfg.Now, cfg.RequestTTL)}
	s.pending = &pendingIndex{capTotal: pendingCap}
	s.logs = newLogLimiter(s.log, 20, time.Minute, cfg.Now)
	s.m = newMetrics(cfg.Hub.Registerer())
	if len(cfg.CIMDHosts) > 0 {
		var hosts []string
		for _, h := range cfg.CIMDHosts {
			h = strings.ToLower(strings.TrimSpace(h))
			if h == "" || strings.ContainsAny(h, "/:@?#") {
				return nil, fmt.Errorf("oauth: CIMD host %q must be a bare host name", h)
			}
			hosts = append(hosts, h)
		}
		s.cimd = newCIMDFetcher(s, hosts, cfg.cimdRoots, cfg.cimdAllowPrivate, cfg.cimdTimeout)
	}
	return s, nil
}

// checkPublicURL returns the issuer: an absolute http(s) URL with a host,
// no path, query, fragment or user info.
func checkPublicURL(raw string) (string, error) {
	raw = strings.TrimRight(raw, "/")
	if raw == "" {
		return "", errors.New("oauth: --public-url is required for OAuth: the issuer and the MCP resource derive from it, never from a request's Host")
	}
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.Path != "" || u.RawQuery != "" || u.Fragment != "" || u.User != nil {
		return "", fmt.Errorf("oauth: public URL %q must be scheme://host[:port] with no path (https except on loopback)", raw)
	}
	if u.Scheme == "http" && !isLoopbackHost(u.Hostname()) {
		return "", fmt.Errorf("oauth: public URL %q must be https: browsers and OAuth clients send codes and tokens to it", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Issuer is the authorization server's issuer identifier.
func (s *Server) Issuer() string { return s.issuer }

// Resource is the canonical MCP resource the tokens are for.
func (s *Server) Resource() string { return s.resource }

// Mount registers the server's paths on mux, wrapped by the hub's Track.
func (s *Server) Mount(mux *http.ServeMux) {
	t := func(f http.HandlerFunc) http.Handler { return s.hub.Track(f) }
	mux.Handle(PathASMetadata, t(s.serveASMetadata))
	mux.Handle("/.well-known/openid-configuration", t(http.NotFound)) // not an OIDC provider
	mux.Handle(PathRegister, t(s.cors(s.serveRegister)))
	mux.Handle("GET "+PathAuthorize, t(s.serveAuthorize))
	mux.Handle("POST "+PathDecision, t(s.serveDecision))
	mux.Handle("GET "+PathWait, t(s.serveWait))
	mux.Handle("GET "+PathLogin, t(s.serveLogin))
	mux.Handle(PathToken, t(s.cors(s.serveToken)))
	mux.Handle(PathRevoke, t(s.cors(s.serveRevoke)))
	mux.Handle("GET "+PathDeviceApprov+"{code}", t(s.hub.DeviceAPI(s.handleDeviceGet)))
	mux.Handle("POST "+PathDeviceApprov+"{code}", t(s.hub.DeviceAPI(s.handleDevicePost)))
	s.mountAdmin(mux, t)
}

// cors lets browser-based clients (the MCP Inspector's web UI) call the
// JSON endpoints; they carry no cookies, so nothing ambient is exposed.
func (s *Server) cors(next http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Access-Control-Allow-Origin", "*")
		if r.Method == http.MethodOptions {
			w.Header().Set("Access-Control-Allow-Methods", "POST, OPTIONS")
			w.Header().Set("Access-Control-Allow-Headers", "Content-Type, Authorization, MCP-Protocol-Version")
			w.WriteHeader(http.StatusNoContent)
			return
		}
		next(w, r)
	}
}

// serveASMetadata answers RFC 8414 metadata.
func (s *Server) serveASMetadata(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Access-Control-Allow-Origin", "*")
	if r.Method == http.MethodOptions {
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	w.Header().Set("Cache-Control", "max-age=300")
	md := map[string]any{
		"issuer":                                         s.issuer,
		"authorization_endpoint":                         s.issuer + PathAuthorize,
		"token_endpoint":                                 s.issuer + PathToken,
		"registration_endpoint":                          s.issuer + PathRegister,
		"revocation_endpoint":                            s.issuer + PathRevoke,
		"response_types_supported":                       []string{"code"},
		"response_modes_supported":                       []string{"query"},
		"grant_types_supported":                          []string{"authorization_code", "refresh_token"},
		"code_challenge_methods_supported":               []string{"S256"},
		"token_endpoint_auth_methods_supported":          []string{"none"},
		"revocation_endpoint_auth_methods_supported":     []string{"none"},
		"scopes_supported":                               []string{ScopeRead, ScopeWrite},
		"authorization_response_iss_parameter_supported": true,
		"service_documentation":                          "https://github.com/roomrelay/roomrelay/blob/main/docs/oauth.md",
	}
	if s.cimd != nil {
		// Only when on: a client that sees it uses CIMD and does not fall
		// back to registration.
		md["client_id_metadata_document_supported"] = true
	}
	writeJSON(w, http.StatusOK, md)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	if w.Header().Get("Cache-Control") == "" {
		w.Header().Set("Cache-Control", "no-store")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// writeOAuthErr answers an *oauthErr as JSON, a storage failure 503.
func (s *Server) writeOAuthErr(w http.ResponseWriter, r *http.Request, err error) {
	var oe *oauthErr
	if errors.As(err, &oe) {
		w.Header().Set("Pragma", "no-cache")
		if oe.status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", strconv.Itoa(int(oe.wait/time.Second)+1))
		}
		if oe.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Basic realm="roomrelay"`)
		}
		writeJSON(w, oe.status, map[string]string{"error": string(oe.code), "error_description": oe.desc})
		return
	}
	s.logs.Log(slog.LevelError, "oauth request failed", "path", r.URL.Path, "err", err)
	writeJSON(w, http.StatusServiceUnavailable, map[string]string{"error": string(codeTemporarilyUnavailable), "error_description": "the hub could not reach its store; retry"})
}

// newSecret returns prefix + 256 random bits, base64url.
func newSecret(prefix string) string {
	var b [32]byte
	rand.Read(b[:])
	return prefix + base64.RawURLEncoding.EncodeToString(b[:])
}

// newID returns prefix + 96 random bits, lower-case hex (a KV key part).
func newID(prefix string) string {
	var b [12]byte
	rand.Read(b[:])
	return prefix + hex.EncodeToString(b[:])
}

// hashSecret is what is stored of a secret: hex SHA-256 over its kind and
// value, so a hash of one kind never matches a key of another.
func hashSecret(kind, secret string) string {
	sum := sha256.Sum256([]byte("roomrelay-oauth:" + kind + ":" + secret))
	return hex.EncodeToString(sum[:])
}

// Hub scopes (hubapi.ScopeRead/ScopeWrite) from and to the MCP scope list.
func mcpScopes(hubScope string) string {
	if hubScope == hubapi.ScopeWrite {
		return ScopeRead + " " + ScopeWrite
	}
	return ScopeRead
}

// parseScope reads a requested scope list: empty asks for everything.
func parseScope(s string) (string, error) {
	out := hubapi.ScopeRead
	fields := strings.Fields(s)
	if len(fields) == 0 {
		return hubapi.ScopeWrite, nil
	}
	for _, f := range fields {
		switch f {
		case ScopeRead:
		case ScopeWrite:
			out = hubapi.ScopeWrite
		default:
			return "", bad(codeInvalidScope, "unknown scope %q: this server grants %s and %s", cut(f, 40), ScopeRead, ScopeWrite)
		}
	}
	return out, nil
}

// cut bounds a string quoted back into an error, never inside a UTF-8
// character.
func cut(s string, n int) string { return relay.Clip(s, n) }

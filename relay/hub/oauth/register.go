package oauth

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"slices"
	"strings"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// Dynamic client registration (RFC 7591): public clients only, and only
// redirect URIs that cannot carry a code to someone else's server without
// the operator's say: loopback http (the code lands on the approver's own
// machine), a short list of known desktop-app schemes, and HTTPS hosts the
// operator allowed.

// knownSchemes are private-use redirect schemes of known MCP clients (RFC
// 8252 §7.1): Cursor and VS Code.
var knownSchemes = []string{"cursor", "vscode", "vscode-insiders"}

const (
	maxRedirectURIs = 8
	maxURILen       = 512
	maxNameLen      = 100
	maxRegisterBody = 16 << 10
)

// isLoopbackHost: the hosts of RFC 8252 §7.3 redirects, localhost included
// (Claude Code registers http://localhost:PORT/callback; redirectMatches
// lets any port through).
func isLoopbackHost(h string) bool {
	if h == "localhost" {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// checkRedirect says why a redirect URI may not be registered, or nil.
func (s *Server) checkRedirect(raw string) string {
	if len(raw) > maxURILen {
		return "longer than 512 bytes"
	}
	u, err := url.Parse(raw)
	if err != nil || !u.IsAbs() {
		return "not an absolute URI"
	}
	if u.Fragment != "" || strings.Contains(raw, "#") {
		return "has a fragment (RFC 6749 §3.1.2)"
	}
	if u.User != nil {
		return "has user info"
	}
	switch u.Scheme {
	case "http":
		if !isLoopbackHost(u.Hostname()) {
			return "http is allowed only to a loopback host (127.0.0.1, [::1], localhost; RFC 8252 §7.3)"
		}
	case "https":
		if !slices.Contains(s.cfg.RedirectHosts, strings.ToLower(u.Hostname())) {
			return "https host " + u.Hostname() + " is not one the hub's operator allowed (--oauth-redirect-host)"
		}
	default:
		if !slices.Contains(knownSchemes, u.Scheme) {
			return "scheme " + u.Scheme + " is not loopback http, an allowed https host, or a known client scheme (" + strings.Join(knownSchemes, ", ") + ")"
		}
	}
	return ""
}

// redirectMatches is exact matching against the registered URIs, except
// that a loopback http redirect may use any port (RFC 8252 §7.3: the
// client picks a free one at request time).
func redirectMatches(registered []string, got string) bool {
	if slices.Contains(registered, got) {
		return true
	}
	g, err := url.Parse(got)
	if err != nil || g.Scheme != "http" || !isLoopbackHost(g.Hostname()) || g.User != nil || g.Fragment != "" {
		return false
	}
	for _, r := range registered {
		u, err := url.Parse(r)
		if err != nil || u.Scheme != "http" {
			continue
		}
		if u.Hostname() == g.Hostname() && u.EscapedPath() == g.EscapedPath() && u.RawQuery == g.RawQuery {
			return true
		}
	}
	return false
}

type registration struct {
	RedirectURIs            []string `json:"redirect_uris"`
	ClientName              string   `json:"client_name"`
	TokenEndpointAuthMethod string   `json:"token_endpoint_auth_method"`
	GrantTypes              []string `json:"grant_types"`
	ResponseTypes           []string `json:"response_types"`
	Scope                   string   `json:"scope"`
}

// serveRegister answers POST /oauth/register.
func (s *Server) serveRegister(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", "POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	addr := s.hub.ClientAddr(r)
	// Counted per client prefix (an IPv6 /64 is one subscriber, however
	// many addresses it uses) and per wider aggregate.
	if ok, wait := s.regLim.take(hub.ClientPrefix(addr)); !ok {
		s.m.registrations.WithLabelValues(string(codeRateLimited)).Inc()
		s.rateLimited(w, wait, fmt.Sprintf("more than %d registrations a minute from this network (client prefix); retry later", s.cfg.RegisterRate))
		return
	}
	if ok, wait := s.regAggr.take(hub.ClientAggregate(addr)); !ok {
		s.m.registrations.WithLabelValues(string(codeRateLimited)).Inc()
		s.rateLimited(w, wait, fmt.Sprintf("more than %d registrations a minute from this network block (IPv4 /24, IPv6 /48); retry later", registerPerAggr*s.cfg.RegisterRate))
		return
	}
	c, err := s.register(r)
	if err != nil {
		var oe *oauthErr
		if errors.As(err, &oe) {
			s.m.registrations.WithLabelValues(string(oe.code)).Inc()
		}
		s.writeOAuthErr(w, r, err)
		return
	}
	s.m.registrations.WithLabelValues("ok").Inc()
	s.log.Info("oauth client registered", "client", c.ID, "name", c.Name, "addr", addr)
	writeJSON(w, http.StatusCreated, map[string]any{
		"client_id":                  c.ID,
		"client_id_issued_at":        c.CreatedAt.Unix(),
		"client_name":                c.Name,
		"redirect_uris":              c.RedirectURIs,
		"token_endpoint_auth_method": "none",
		"grant_types":                []string{"authorization_code", "refresh_token"},
		"response_types":             []string{"code"},
		"scope":                      ScopeRead + " " + ScopeWrite,
	})
}

func (s *Server) register(r *http.Request) (*clientRec, error) {
	var req registration
	dec := json.NewDecoder(io.LimitReader(r.Body, maxRegisterBody))
	if err := dec.Decode(&req); err != nil {
		return nil, bad(codeInvalidClientMetadata, "the body must be a JSON client metadata document (RFC 7591) of at most 16 KiB")
	}
	name, ok, err := s.checkMetadata(req)
	if err != nil {
		return nil, err
	}
	c := &clientRec{ID: newID("rrcl-"), Name: name, RedirectURIs: ok, CreatedAt: s.cfg.Now().UTC()}
	if err := s.createClient(r.Context(), c); err != nil {
		return nil, unavailable("store the registration", err)
	}
	return c, nil
}

// checkMetadata applies the registration rules to client metadata (a
// registration's body, or a client ID metadata document): public clients,
// code and refresh grants, known scopes, a clean name, and the redirect
// URIs checkRedirect allows (the allowed subset; none is refused).
func (s *Server) checkMetadata(req registration) (string, []string, error) {
	if len(req.RedirectURIs) == 0 || len(req.RedirectURIs) > maxRedirectURIs {
		return "", nil, bad(codeInvalidRedirectURI, "redirect_uris must list 1 to %d URIs", maxRedirectURIs)
	}
	switch req.TokenEndpointAuthMethod {
	case "", "none":
	default:
		return "", nil, bad(codeInvalidClientMetadata, "only public clients are registered: token_endpoint_auth_method must be none (PKCE protects the code)")
	}
	for _, g := range req.GrantTypes {
		if g != "authorization_code" && g != "refresh_token" {
			return "", nil, bad(codeInvalidClientMetadata, "grant type %q is not supported: authorization_code and refresh_token only", cut(g, 40))
		}
	}
	for _, t := range req.ResponseTypes {
		if t != "code" {
			return "", nil, bad(codeInvalidClientMetadata, "response type %q is not supported: code only", cut(t, 40))
		}
	}
	if _, err := parseScope(req.Scope); err != nil {
		return "", nil, bad(codeInvalidClientMetadata, "%s", err.(*oauthErr).desc)
	}
	name := strings.TrimSpace(req.ClientName)
	if len(name) > maxNameLen || strings.ContainsFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
		return "", nil, bad(codeInvalidClientMetadata, "client_name is at most 100 bytes without control characters")
	}
	if name == "" {
		name = "unnamed client"
	}
	// RFC 7591 §3.2.1 lets the server replace metadata: the allowed subset
	// is registered (VS Code lists https and loopback URIs together).
	var ok []string
	var why string
	for _, u := range req.RedirectURIs {
		if reason := s.checkRedirect(u); reason != "" {
			why = cut(u, 80) + ": " + reason
			continue
		}
		if !slices.Contains(ok, u) {
			ok = append(ok, u)
		}
	}
	if len(ok) == 0 {
		return "", nil, bad(codeInvalidRedirectURI, "no redirect URI is allowed (%s)", why)
	}
	return name, ok, nil
}

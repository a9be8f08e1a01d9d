package hubcmd

import (
	"encoding/json"
	"flag"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hub/oauth"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The hub server's OAuth flags: the authorization server MCP clients sign
// in with (relay/hub/oauth). It needs a public URL: the issuer and the MCP
// resource derive from it, never from a request's Host. That is
// --public-url, or for a hub listening on loopback its own listen address
// (loopbackURL), so the README's two-terminal hub serves OAuth with no flag.

type oauthOptions struct {
	on                                bool
	accessTTL, refreshTTL, graceAfter time.Duration
	redirectHosts                     []string
	cimdHosts                         []string
}

type oauthFlags struct {
	on                                *bool
	accessTTL, refreshTTL, graceAfter *time.Duration
	redirectHosts, cimdHosts          stringList
}

func addOAuthFlags(fs *flag.FlagSet) *oauthFlags {
	f := &oauthFlags{
		on:         fs.Bool("oauth", true, "serve the OAuth authorization server for MCP clients (needs --public-url, except on loopback where the listen address is the issuer; --oauth=false: client tokens only)"),
		accessTTL:  fs.Duration("oauth-access-ttl", time.Hour, "OAuth access token lifetime"),
		refreshTTL: fs.Duration("oauth-refresh-ttl", 30*24*time.Hour, "how long an unused OAuth refresh token lives (at most 2160h)"),
		graceAfter: fs.Duration("oauth-refresh-grace", 2*time.Minute, "how long a rotated refresh token still works (clients race their refreshes); a later reuse revokes the grant"),
	}
	fs.Var(&f.redirectHosts, "oauth-redirect-host", "an https `host` registered clients may redirect to, beside loopback and the defaults ("+strings.Join(oauth.DefaultRedirectHosts, ", ")+"); repeatable")
	fs.Var(&f.cimdHosts, "oauth-cimd-host", "fetch client ID metadata documents (a client_id that is an https URL) from this `host`; repeatable; none: CIMD off and not advertised, clients register")
	return f
}

func (f *oauthFlags) options(publicURL string) oauthOptions {
	return oauthOptions{on: *f.on && publicURL != "", accessTTL: *f.accessTTL, refreshTTL: *f.refreshTTL, graceAfter: *f.graceAfter,
		redirectHosts: append(append([]string(nil), oauth.DefaultRedirectHosts...), f.redirectHosts...), cimdHosts: f.cimdHosts}
}

// mountFront mounts the MCP front and, when on, the OAuth server on mux.
func mountFront(mux *http.ServeMux, h *hub.Hub, publicURL, version string, o oauthOptions, log *slog.Logger) error {
	cfg := mcpfront.Config{Hub: h, PublicURL: publicURL, Version: version, Logger: log}
	if !o.on {
		// Without this, the operator's OAuth commands and an MCP client's
		// registration would meet the mux's bare "404 page not found".
		mountOAuthOff(mux)
	}
	if o.on {
		as, err := oauth.New(oauth.Config{Hub: h, PublicURL: publicURL, ResourcePath: mcpfront.Path, AccessTTL: o.accessTTL,
			RefreshTTL: o.refreshTTL, RefreshGrace: o.graceAfter, RedirectHosts: o.redirectHosts, CIMDHosts: o.cimdHosts, Logger: log})
		if err != nil {
			return usagef("%v", err)
		}
		as.Mount(mux)
		cfg.OAuth = as
	}
	front, err := mcpfront.New(cfg)
	if err != nil {
		return err
	}
	front.Mount(mux)
	return nil
}

// errOAuthOff is what every OAuth path answers on a hub without OAuth.
const errOAuthOff = "OAuth is off on this hub: start it with --public-url URL"

// mountOAuthOff answers the OAuth server's paths (the operator's API, the
// device approvals, the endpoints MCP clients discover) with 404 and
// errOAuthOff, code oauth_off.
func mountOAuthOff(mux *http.ServeMux) {
	off := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		w.WriteHeader(hubapi.Status(hubapi.CodeOAuthOff))
		_ = json.NewEncoder(w).Encode(hubapi.ErrorBody{Error: hubapi.ErrorDetail{Code: hubapi.CodeOAuthOff, Message: errOAuthOff}})
	})
	for _, p := range []string{"/v1/oauth/", "/oauth/", oauth.PathASMetadata} {
		mux.Handle(p, off)
	}
}

// loopbackURL is the public URL of a hub that listens on loopback and was
// given none: its listen address as clients on this machine reach it ("" for
// any other listener). "localhost" stays as written, so the issuer matches
// the URL the user types.
func loopbackURL(listen string, ln net.Listener, overTLS bool) string {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return ""
	}
	addr, ok := ln.Addr().(*net.TCPAddr)
	if !ok || !addr.IP.IsLoopback() {
		return ""
	}
	scheme := "http://"
	if overTLS {
		scheme = "https://"
	}
	if strings.EqualFold(host, "localhost") {
		return scheme + net.JoinHostPort("localhost", strconv.Itoa(addr.Port))
	}
	return scheme + ln.Addr().String()
}

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, strings.ToLower(strings.TrimSpace(v)))
	return nil
}

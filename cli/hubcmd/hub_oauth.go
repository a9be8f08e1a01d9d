package hubcmd

import (
	"flag"
	"log/slog"
	"net/http"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hub/oauth"
)

// The hub server's OAuth flags: the authorization server MCP clients sign
// in with (relay/hub/oauth). It is on when --public-url is set, which it
// needs: the issuer and the MCP resource derive from it, never from a
// request's Host.

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
		on:         fs.Bool("oauth", true, "serve the OAuth authorization server for MCP clients (needs --public-url; --oauth=false: client tokens only)"),
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

// stringList is a repeatable string flag.
type stringList []string

func (l *stringList) String() string { return strings.Join(*l, ",") }

func (l *stringList) Set(v string) error {
	*l = append(*l, strings.ToLower(strings.TrimSpace(v)))
	return nil
}

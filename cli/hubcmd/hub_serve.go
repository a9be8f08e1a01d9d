package hubcmd

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
)

// This file is the hub server command. The device binary
// (cmd/roomrelay-agent) does not import this package, so it links no
// nats-server, whose process sampler would wake an idle agent every second.

func init() {
	cli.Register(&cli.Command{
		Name:     "hub",
		Daemon:   true,
		Synopsis: "[--listen ADDR] [--data-dir DIR] [--nats URL] [--tls-cert FILE --tls-key FILE] [--trusted-proxy CIDR]...",
		Summary:  "run the cloud hub: the agents' websocket endpoint, the HTTP API and the MCP endpoint",
		Help: `The hub stores enrollments and routes commands through NATS: an embedded
in-process server with JetStream in the data dir by default (no port opened),
or an external NATS server or cluster with --nats. Its admin token is read from
--admin-token, ROOMRELAY_ADMIN_TOKEN, or the file admin-token in the data dir
(created 0600 on first start). MCP clients (Claude Code and others) connect
to {hub}/mcp and sign in with OAuth (docs/oauth.md: on loopback the hub is its
own issuer; elsewhere it needs --public-url), or send a client token from
` + "`roomrelay hub token create`" + `.
Prometheus metrics: {hub}/metrics (admin token) or --metrics-listen; see docs/metrics.md.

For non-loopback use serve HTTPS: --tls-cert and --tls-key (PEM files; a
renewed certificate is picked up when the files change, no restart). Agents
and admin commands then use an https:// hub URL; for a private CA they take
--ca-file (or ROOMRELAY_CA_FILE). Behind a reverse proxy that terminates
TLS, name it with --trusted-proxy so the enrollment limit and the logs see
the client address from X-Forwarded-For (from other peers it is ignored),
and the proxy is not capped as one client. --replicas, --startup-timeout,
--nats-creds and --nats-tls-ca are for an operated NATS cluster (--nats).`,
		Setup: setupHub,
	})
}

// setupHub parses the flags of `roomrelay hub` and returns its runner.
func setupHub(fs *flag.FlagSet, e *cli.Env) cli.Runner {
	listen := fs.String("listen", cli.DefaultHubListen, "HTTP listen `address`")
	perAddr := fs.Int("max-conns-per-addr", defaultConnLimits.perAddr, "plain HTTP connections one client address (IPv6: one /64) may hold (agent websockets excluded; 0: no cap)")
	maxConns := fs.Int("max-conns", defaultConnLimits.total, "plain HTTP connections in all (keep it below the fd limit; 0: no cap); at the cap a lighter client takes the place of the heaviest prefix's oldest idle or slow connection, never one whose request is being served")
	publicURL := fs.String("public-url", "", "the hub's base `url` as clients reach it (https://hub.example.com): the MCP metadata, and the OAuth issuer (default on a loopback --listen: that address; elsewhere OAuth is off without it and the MCP metadata follow each request's Host)")
	dataDir := cli.HubDataDirFlags(fs, e)
	natsURL := fs.String("nats", e.Getenv("ROOMRELAY_NATS_URL"), "external NATS `url` (default: embedded; env ROOMRELAY_NATS_URL)")
	heartbeat := fs.Duration("heartbeat", hub.DefaultHeartbeat, "ping interval; the read deadline is 2.5x")
	node := fs.String("node", "", "node `name` in presence records (default hostname)")
	metricsListen := fs.String("metrics-listen", "", "also serve /metrics on this `address`, without the admin token (keep it internal)")
	_, adminTokenFile, readAdminToken := cli.AdminTokenFlags(fs)
	sf := addHubServeFlags(fs)
	of := addOAuthFlags(fs)
	return func(ctx context.Context, args []string) error {
		if len(args) > 0 {
			return usagef("unexpected argument %q (subcommands: pair, revoke, devices, call)", args[0])
		}
		tlsCfg, err := sf.tls(e.Logger)
		if err != nil {
			return err
		}
		dir, err := dataDir()
		if err != nil {
			return err
		}
		adminToken, err := readAdminToken()
		if err != nil {
			return err
		}
		tok, err := serveAdminToken(e, dir, adminToken)
		if err != nil {
			return err
		}
		hcfg := hub.Config{DataDir: dir, NATSURL: *natsURL, AdminToken: tok,
			Heartbeat: *heartbeat, NodeName: *node, Logger: e.Logger}
		if err := sf.apply(&hcfg); err != nil {
			return err
		}
		ln, err := listenHub(*listen)
		if err != nil {
			return hubStartErr(err)
		}
		public := *publicURL
		if public == "" && *of.on {
			public = loopbackURL(*listen, ln, tlsCfg != nil)
		}
		srv, err := startHubServer(ctx, hcfg, ln, public, of.options(public), withConns(*perAddr, *maxConns), tlsCfg)
		if err != nil {
			return hubStartErr(err)
		}
		if err := cli.SaveHubURL(dir, adminURL(srv.url, *publicURL, tlsCfg != nil)); err != nil {
			e.Logger.Warn("admin commands will not find this hub by its data dir", "err", err)
		}
		msrv, err := serveMetrics(srv.hub, *metricsListen, e.Logger)
		if err != nil {
			return exitErr(cli.ExitUnavailable, errors.Join(err, srv.close()))
		}
		defer msrv.close() // after the hub stopped: scrapes see the drain
		nats := "embedded NATS in " + filepath.Join(dir, "nats")
		if *natsURL != "" {
			nats = "NATS at " + *natsURL
		}
		fmt.Fprintf(e.Stderr, "roomrelay hub listening on %s (%s); admin token in %s; MCP endpoint %s%s\n",
			srv.url, nats, adminTokenSource(e, dir, adminToken, *adminTokenFile), srv.url, mcpfront.Path)
		switch oa := of.options(public); {
		case oa.on && *publicURL == "":
			fmt.Fprintf(e.Stderr, "OAuth for MCP clients: issuer %s (a loopback hub is its own issuer; elsewhere give --public-url); approve on the device or add approvers with `roomrelay hub approver add NAME --project P`\n", public)
		case oa.on:
			fmt.Fprintf(e.Stderr, "OAuth for MCP clients: issuer %s; add approvers with `roomrelay hub approver add NAME --project P`\n", public)
		case !*of.on:
			fmt.Fprintln(e.Stderr, "OAuth for MCP clients is off (--oauth=false); MCP clients use client tokens")
		default:
			fmt.Fprintln(e.Stderr, "OAuth for MCP clients is off (a hub not on loopback needs --public-url); MCP clients use client tokens")
		}
		fmt.Fprint(e.Stderr, msrv.banner())
		if err := srv.wait(); err != nil && !errors.Is(err, context.Canceled) {
			return err
		}
		return nil
	}
}

// adminURL is where admin commands on this machine reach the hub: its
// listen address, a wildcard one as loopback; over TLS the public URL when
// there is one (the certificate names it, not 127.0.0.1).
func adminURL(served, publicURL string, overTLS bool) string {
	if overTLS && publicURL != "" {
		return strings.TrimRight(publicURL, "/")
	}
	u, err := url.Parse(served)
	if err != nil {
		return served
	}
	if ip := net.ParseIP(u.Hostname()); ip != nil && ip.IsUnspecified() {
		u.Host = net.JoinHostPort("127.0.0.1", u.Port())
	}
	return u.String()
}

// connLimits caps plain HTTP connections per client address and in total
// (agent websockets do not count once upgraded), and bounds how long a
// client may take: headers, a whole request, an answer (long handlers
// extend their own), an idle keep-alive.
type connLimits struct {
	perAddr, total                 int
	header, read, write, idleAfter time.Duration
}

var defaultConnLimits = connLimits{perAddr: 256, total: 4096,
	header: 10 * time.Second, read: 30 * time.Second, write: 30 * time.Second, idleAfter: 30 * time.Second}

func withConns(perAddr, total int) connLimits {
	l := defaultConnLimits
	l.perAddr, l.total = perAddr, total
	return l
}

// hubServer is a running hub node served on a listener: the hub's API and
// agent endpoint, and its MCP front at /mcp.
type hubServer struct {
	hub       *hub.Hub
	url       string
	conns     *hub.ConnLimiter
	srv       *http.Server
	stop      context.CancelFunc
	runEnded  chan struct{} // closed when the hub's Run returned runErr
	runErr    error
	serveErr  chan error // Serve's failure (other than a close)
	closeOnce sync.Once
}

// listenHub takes the hub's port first: a clash fails before the hub opens
// its data dir, and a caller listening on port 0 knows its URL (the OAuth
// issuer) before the hub is configured.
func listenHub(addr string) (net.Listener, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("hub: listen: %w", err)
	}
	return ln, nil
}

// startHubServer runs a hub and serves it on ln until ctx ends, over TLS
// when tlsCfg is set; it returns once the hub is ready (or failed to
// start, closing ln).
func startHubServer(ctx context.Context, cfg hub.Config, ln net.Listener, publicURL string, oa oauthOptions, limits connLimits, tlsCfg *tls.Config) (*hubServer, error) {
	h, err := hub.New(cfg)
	if err != nil {
		ln.Close()
		return nil, err
	}
	mux := http.NewServeMux()
	if err := mountFront(mux, h, publicURL, cli.Version, oa, cfg.Logger); err != nil {
		ln.Close()
		return nil, err
	}
	mux.Handle("/", h.Handler())
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	hctx, stop := context.WithCancel(ctx)
	conns := hub.NewConnLimiter(limits.perAddr, limits.total)
	conns.ExemptFromPerAddr(cfg.TrustedProxies) // one proxy address carries many clients
	scheme := "http://"
	if tlsCfg != nil {
		// Wrapped here, not by ServeTLS: the ConnLimiter sees the accept
		// before any handshake work.
		ln, scheme = tls.NewListener(ln, tlsCfg), "https://"
	}
	s := &hubServer{hub: h, url: scheme + ln.Addr().String(), stop: stop, conns: conns,
		runEnded: make(chan struct{}), serveErr: make(chan error, 1),
		srv: &http.Server{
			Handler: mux,
			// Agent sockets are hijacked: gorilla clears these deadlines and
			// the session keeps its own.
			ReadHeaderTimeout: limits.header,
			ReadTimeout:       limits.read,
			WriteTimeout:      limits.write,
			IdleTimeout:       limits.idleAfter,
			ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelWarn),
		}}
	// The caps, and which connections serve a request (never evicted).
	conns.Install(s.srv)
	go func() {
		s.runErr = h.Run(hctx)
		close(s.runEnded)
	}()
	// The port is taken at once (a clash fails fast) but served only once
	// the hub is ready: a client that connects early waits in the backlog
	// instead of getting 503 starting.
	select {
	case <-h.Ready():
	case <-s.runEnded:
		ln.Close()
		stop()
		return nil, s.runErr
	}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.serveErr <- fmt.Errorf("hub: serve: %w", err)
		}
	}()
	return s, nil
}

// wait serves until ctx ends (or serving fails), then stops the hub (which
// drains its agents) and the listener.
func (s *hubServer) wait() error {
	var serveErr error
	select {
	case <-s.runEnded:
	case serveErr = <-s.serveErr:
	}
	return errors.Join(serveErr, s.close())
}

// close stops the hub, then the listener; safe to call more than once.
func (s *hubServer) close() error {
	s.closeOnce.Do(func() {
		s.stop()
		<-s.runEnded
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if s.srv.Shutdown(ctx) != nil {
			s.srv.Close()
		}
	})
	return s.runErr
}

// serveAdminToken is the hub's own admin token: flag, env, or the data dir
// file, created on first start.
func serveAdminToken(e *cli.Env, dataDir, flagTok string) (string, error) {
	if flagTok != "" || e.Getenv("ROOMRELAY_ADMIN_TOKEN") != "" {
		return cli.AdminToken(e, dataDir, flagTok)
	}
	return hub.LoadOrCreateAdminToken(dataDir)
}

func adminTokenSource(e *cli.Env, dir, flagTok, file string) string {
	switch {
	case file != "":
		return file
	case flagTok != "":
		return "--admin-token"
	case e.Getenv("ROOMRELAY_ADMIN_TOKEN") != "":
		return "ROOMRELAY_ADMIN_TOKEN"
	}
	return filepath.Join(dir, "admin-token")
}

func hubStartErr(err error) error {
	var oe *net.OpError
	if errors.As(err, &oe) && oe.Op == "listen" {
		return exitErr(cli.ExitUnavailable, fmt.Errorf("%w (another hub running? choose another --listen)", err))
	}
	return err
}

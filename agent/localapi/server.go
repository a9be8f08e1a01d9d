package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/review"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/keyrate"
	"github.com/roomrelay/roomrelay/relay"
)

// API versions. APIVersion grows its minor with every addition within v1;
// a path under another major is answered unsupported_api_version.
const (
	APIVersion    = "1.1"
	APIMinVersion = "1.0"
	Prefix        = "/localapi/v1/"
	// HeaderAPIVersion and HeaderVersion are on every response;
	// HeaderClient is what a client names itself with (into the audit line).
	HeaderAPIVersion = "Roomrelay-Api-Version"
	HeaderVersion    = "Roomrelay-Version"
	HeaderClient     = "Roomrelay-Client"
	// Host is the Host a client sends (empty and "localhost" are accepted
	// too): any other is a request meant for somewhere else.
	Host = "roomrelay.local"
)

// Request-rule defaults.
const (
	DefaultMaxConns       = 32
	DefaultMaxBody        = 1 << 20
	DefaultHeaderTimeout  = 10 * time.Second
	RefusalBurst          = 10
	RefusalsPerMinute     = 30
	maxHeaderBytes        = 64 << 10
	idleTimeout           = 2 * time.Minute
	shutdownGrace         = 3 * time.Second
	providerUnavailableTx = "this agent runs no room provider endpoint"
)

// ProviderState is the room provider's presence, for status and snapshots
// (agent/events' type: a snapshot carries it).
type ProviderState = events.ProviderState

// ProviderStater reports the room provider's state (agent/provider).
type ProviderStater interface {
	ProviderState() ProviderState
}

// ProposalStore is what the review routes need of the local store (a
// *rooms.Store).
type ProposalStore interface {
	ListProposals(ctx context.Context, f rooms.ProposalFilter) ([]rooms.Proposal, error)
	GetProposal(ctx context.Context, id string) (rooms.ProposalDetail, error)
	// Decide approves or declines with decided_via, which the proposal
	// keeps (the daemon then knows the API told local apps itself).
	Decide(ctx context.Context, id string, d rooms.Decision) (rooms.Proposal, error)
}

// AuditLog is the agent's audit log (an *audit.Log): refusals and
// decisions are appended, GET audit reads it.
type AuditLog interface {
	Append(e audit.Entry) (audit.Entry, error)
	Query(f audit.Filter) ([]audit.Entry, error)
}

// Config is what the daemon hands the server. Nothing here comes from the
// network.
type Config struct {
	Listen ListenConfig
	// ConfigDir holds the discovery file and, unless PolicyPath says
	// otherwise, the policy file.
	ConfigDir  string
	PolicyPath string
	Version    string // roomrelay's build version
	// Enrolled lists the projects the hub enrolled the device for
	// (config.json), for GET projects; nil: none known.
	Enrolled func() []string

	// Events is the ring the event stream reads (the daemon's publisher
	// writes into it); nil: a fresh one. Its boot id is the API's.
	Events *Events
	// Publisher is what the API's own events (proposal_decided,
	// provider_selected) go through: the daemon's one publisher; nil:
	// straight into Events.
	Publisher events.Publisher

	Status    func() agent.Status // the running agent's live status
	Provider  ProviderStater      // nil: no provider connected
	Proposals ProposalStore
	Audit     AuditLog
	// Checker runs the pre-approval sandbox check; nil answers unavailable.
	Checker      review.Checker
	CheckTimeout time.Duration
	// ProviderHandler serves /localapi/v1/provider (the provider's
	// websocket); nil answers 503 unavailable.
	ProviderHandler http.Handler
	// OAuth reads and decides an MCP client's sign-in with the device token
	// (GET/POST oauth/{code}); nil answers unavailable.
	OAuth OAuthApprover

	// Decided is called after a decision (the daemon tells the hub at
	// once; the proposal carries decided_via); PolicySaved after the API
	// wrote the policy file (the daemon reloads it and publishes
	// policy_changed).
	Decided     func(ctx context.Context, p rooms.Proposal)
	PolicySaved func(ctx context.Context)

	MaxConns      int           // concurrent connections (default 32)
	MaxBody       int64         // request body bytes (default 1 MiB)
	HeaderTimeout time.Duration // reading a request's headers (default 10 s)
	PingEvery     time.Duration // an event stream's keepalive (default 30 s)
	Now           func() time.Time
	Logger        *slog.Logger
}

// Server is the local API, listening.
type Server struct {
	cfg    Config
	log    *slog.Logger
	ln     net.Listener
	ep     Endpoint
	events *Events
	pub    events.Publisher
	mux    *http.ServeMux

	refusals *refusalLimiter
	policyMu sync.Mutex // one policy writer at a time
	conns    atomic.Int64
	runOnce  atomic.Bool
}

// Open listens (Listen) and builds the server; Run serves.
func Open(cfg Config) (*Server, error) {
	s, err := newServer(cfg)
	if err != nil {
		return nil, err
	}
	ln, ep, err := Listen(cfg.Listen)
	if err != nil {
		return nil, err
	}
	s.ln, s.ep = &limitListener{Listener: ln, s: s}, ep
	if ep.Note != "" {
		s.log.Info("local api: " + ep.Note)
	}
	return s, nil
}

func newServer(cfg Config) (*Server, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxConns <= 0 {
		cfg.MaxConns = DefaultMaxConns
	}
	if cfg.MaxBody <= 0 {
		cfg.MaxBody = DefaultMaxBody
	}
	if cfg.HeaderTimeout <= 0 {
		cfg.HeaderTimeout = DefaultHeaderTimeout
	}
	if cfg.PingEvery <= 0 {
		cfg.PingEvery = defaultPingEvery
	}
	if cfg.CheckTimeout <= 0 {
		cfg.CheckTimeout = review.DefaultCheckTimeout
	}
	if cfg.PolicyPath == "" && cfg.ConfigDir != "" {
		cfg.PolicyPath = cfg.ConfigDir + string(os.PathSeparator) + "policy"
	}
	if cfg.Status == nil {
		return nil, errors.New("local api: Config.Status is required")
	}
	ev := cfg.Events
	if ev == nil {
		ev = NewEvents("", 0)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, events: ev, pub: cfg.Publisher, refusals: newRefusalLimiter(cfg.Now)}
	if s.pub == nil {
		s.pub = ev
	}
	s.routes()
	return s, nil
}

// Endpoint is where the server listens.
func (s *Server) Endpoint() Endpoint { return s.ep }

// Events is the server's event ring.
func (s *Server) Events() *Events { return s.events }

// Close releases the listener of a server whose Run was never called.
func (s *Server) Close() error {
	if s.ln != nil && !s.runOnce.Load() {
		return s.ln.Close()
	}
	return nil
}

// Run writes the discovery file, serves until ctx ends, then shuts down
// (open event streams end at once, other requests get a moment) and
// removes the discovery file.
func (s *Server) Run(ctx context.Context) error {
	if s.ln == nil || !s.runOnce.CompareAndSwap(false, true) {
		return errors.New("local api: Run needs a server from Open, once")
	}
	srv := &http.Server{
		Handler:           s,
		ReadHeaderTimeout: s.cfg.HeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		BaseContext:       func(net.Listener) context.Context { return ctx },
		ConnContext:       s.connContext,
	}
	if s.cfg.ConfigDir != "" {
		err := WriteDiscovery(s.cfg.ConfigDir, Discovery{Transport: s.ep.Transport, Path: s.ep.Path,
			PID: os.Getpid(), BootID: s.events.BootID(), API: APIVersion, Version: s.cfg.Version})
		if err != nil {
			s.ln.Close()
			return err
		}
		defer removeDiscovery(s.cfg.ConfigDir, s.events.BootID())
	}
	s.log.Info("local api listening", "transport", s.ep.Transport, "path", s.ep.Path)
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(s.ln) }()
	var err error
	select {
	case <-ctx.Done():
	case err = <-errc:
	}
	shCtx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if serr := srv.Shutdown(shCtx); serr != nil {
		srv.Close()
	}
	if err == nil {
		err = <-errc
	}
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	if err != nil {
		return fmt.Errorf("local api: serve: %w", err)
	}
	return nil
}

type peerKey struct{}

// peerInfo is a connection's peer, or why it could not be identified.
type peerInfo struct {
	peer Peer
	err  error
}

func (s *Server) connContext(ctx context.Context, c net.Conn) context.Context {
	p, err := PeerOf(c)
	return context.WithValue(ctx, peerKey{}, &peerInfo{peer: p, err: err})
}

// PeerFrom is the peer of the request's connection (for the provider
// handler's log and audit lines); false for a request not from Run's
// listener.
func PeerFrom(ctx context.Context) (Peer, bool) {
	pi, ok := ctx.Value(peerKey{}).(*peerInfo)
	if !ok || pi.err != nil {
		return Peer{}, false
	}
	return pi.peer, true
}

// ServeHTTP applies the request rules, then routes.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set(HeaderAPIVersion, APIVersion)
	h.Set(HeaderVersion, s.cfg.Version)
	h.Set("Content-Security-Policy", "default-src 'none'; frame-ancestors 'none'")
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Cache-Control", "no-store")
	// Every request needs its connection's peer, identified by Run's
	// listener: served any other way, it is refused.
	pi, ok := r.Context().Value(peerKey{}).(*peerInfo)
	switch {
	case !ok:
		s.refuse(w, r, Peer{UID: -1}, CodeForbidden, "the caller could not be identified: not a connection of the local API's listener")
		return
	case pi.err != nil:
		s.refuse(w, r, pi.peer, CodeForbidden, "the caller could not be identified: "+pi.err.Error())
		return
	case !pi.peer.Owner:
		s.refuse(w, r, pi.peer, CodeForbidden, "only the user the agent runs as may use its local API")
		return
	}
	peer := pi.peer
	if r.Header.Get("Origin") != "" || r.Header.Get("Referer") != "" {
		s.refuse(w, r, peer, CodeForbidden, "a request with an Origin or Referer header comes from a web page; the local API serves local programs only")
		return
	}
	if !validHost(r.Host) {
		s.refuse(w, r, peer, CodeForbidden, fmt.Sprintf("Host %q is not this agent (use %s)", relay.Clip(r.Host, 100), Host))
		return
	}
	if r.ContentLength > s.cfg.MaxBody {
		writeError(w, apiErr(CodeTooLarge, fmt.Sprintf("the body is over %d bytes", s.cfg.MaxBody)))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBody)
	if !strings.HasPrefix(r.URL.Path, Prefix) {
		if major, ok := otherMajor(r.URL.Path); ok {
			writeError(w, apiErr(CodeUnsupportedAPIVersion,
				fmt.Sprintf("API version %s is not served by this agent (roomrelay %s); supported: v1 (1.0 to %s)", major, s.cfg.Version, APIVersion)))
			return
		}
		writeError(w, apiErr(CodeNotFound, "no such route; the API is under "+Prefix))
		return
	}
	s.mux.ServeHTTP(w, r)
}

// validHost accepts what local clients send: nothing, "localhost" (Node's
// default), or the API's name, with or without a port.
func validHost(h string) bool {
	if host, _, err := net.SplitHostPort(h); err == nil {
		h = host
	}
	return h == "" || h == "localhost" || h == Host
}

// otherMajor reports a /localapi/vN/ path and its vN.
func otherMajor(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, "/localapi/")
	if !ok {
		return "", false
	}
	v, _, _ := strings.Cut(rest, "/")
	if len(v) < 2 || v[0] != 'v' || strings.Trim(v[1:], "0123456789") != "" {
		return "", false
	}
	return v, true
}

// refuse answers a refused request and audits it with the peer, at most
// RefusalBurst at once and RefusalsPerMinute after that; past the rate the
// answer is rate_limited and the line is skipped (the next written line
// says how many were).
func (s *Server) refuse(w http.ResponseWriter, r *http.Request, p Peer, code, msg string) {
	ok, skipped := s.refusals.allow()
	if !ok {
		writeError(w, apiErr(CodeRateLimited, "too many refused requests; slow down"))
		return
	}
	detail := fmt.Sprintf("uid=%d pid=%d exe=%q method=%s path=%q: %s", p.UID, p.PID, p.Exe, r.Method, relay.Clip(r.URL.Path, 200), msg)
	if p.SID != "" {
		detail = "sid=" + p.SID + " " + detail
	}
	if skipped > 0 {
		detail += fmt.Sprintf(" (%d earlier refusals not written: over the rate)", skipped)
	}
	s.log.Warn("local api: request refused", "code", code, "uid", p.UID, "pid", p.PID, "path", r.URL.Path, "reason", msg)
	s.auditLine(audit.Entry{Command: "localapi.refused", Decision: audit.Denied, ErrorCode: code, Detail: detail})
	writeError(w, apiErr(code, msg))
}

func (s *Server) auditLine(e audit.Entry) {
	if s.cfg.Audit == nil {
		return
	}
	if _, err := s.cfg.Audit.Append(e); err != nil {
		s.log.Error("local api: audit append failed", "command", e.Command, "err", err)
	}
}

// refusalLimiter is a token bucket for audited refusals, counting the
// refusals it skipped.
type refusalLimiter struct {
	bucket  *keyrate.Buckets
	mu      sync.Mutex
	skipped int
}

func newRefusalLimiter(now func() time.Time) *refusalLimiter {
	return &refusalLimiter{bucket: keyrate.New(1, now)}
}

// allow takes a token; it returns how many refusals went unwritten since
// the last allowed one.
func (l *refusalLimiter) allow() (bool, int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if ok, _ := l.bucket.Take("", keyrate.Per(RefusalsPerMinute, time.Minute, RefusalBurst), 1); !ok {
		l.skipped++
		return false, 0
	}
	n := l.skipped
	l.skipped = 0
	return true, n
}

// limitListener sheds connections past MaxConns: the extra one gets a 503
// busy answer and is closed, and the refusal is audited like others.
type limitListener struct {
	net.Listener
	s *Server
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if n := l.s.conns.Add(1); n > int64(l.s.cfg.MaxConns) {
			l.s.conns.Add(-1)
			l.s.shed(c)
			continue
		}
		return &countedConn{Conn: c, s: l.s}, nil
	}
}

func (s *Server) shed(c net.Conn) {
	p, _ := PeerOf(c)
	if ok, skipped := s.refusals.allow(); ok {
		detail := fmt.Sprintf("uid=%d pid=%d exe=%q: over %d connections at once", p.UID, p.PID, p.Exe, s.cfg.MaxConns)
		if skipped > 0 {
			detail += fmt.Sprintf(" (%d earlier refusals not written: over the rate)", skipped)
		}
		s.auditLine(audit.Entry{Command: "localapi.refused", Decision: audit.Denied, ErrorCode: CodeBusy, Detail: detail})
	}
	_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	e := apiErr(CodeBusy, "too many connections to the local API at once")
	b, _ := json.Marshal(map[string]*APIError{"error": e})
	body := string(b) + "\n"
	fmt.Fprintf(c, "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nConnection: close\r\n%s: %s\r\nContent-Length: %d\r\n\r\n%s",
		e.Status, http.StatusText(e.Status), HeaderAPIVersion, APIVersion, len(body), body)
	c.Close()
}

// countedConn gives its slot back once closed.
type countedConn struct {
	net.Conn
	s    *Server
	once sync.Once
}

func (c *countedConn) Unwrap() net.Conn { return c.Conn }

func (c *countedConn) Close() error {
	c.once.Do(func() { c.s.conns.Add(-1) })
	return c.Conn.Close()
}

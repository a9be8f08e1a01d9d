package hub

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// Hub is one hub node, a library its caller mounts: create it with New,
// run it with Run, and serve Handler on a listener of the caller's (which
// owns the http.Server, its timeouts and TLS).
type Hub struct {
	cfg  Config
	log  *slog.Logger
	devs *deviceCache // device records for commands (devcache.go)

	ready chan struct{}
	// Set up by Run before ready is closed.
	runCtx context.Context // ends when Run's ctx does; request contexts follow it
	nc     *nats.Conn
	js     jetstream.JetStream
	st     *store
	cmdCh  chan *nats.Msg // deliveries of every session's command subscription

	cancels callCancels // the MCP front's cancels between nodes (callcancel.go)

	upgrader  websocket.Upgrader
	enrollLim *failLimiter  // failed enrollments per client address (this node)
	uses      tokenUse      // when this node last recorded each client token's use
	dir       *mirror       // this node's copy of the room directory
	devMirror *deviceMirror // this node's copy of the device records (devmirror.go)
	natsBack  *broadcast    // fired on each NATS reconnect: the bucket copies watch again (watch.go)
	nodes     nodeTable     // which hub nodes are alive
	replies   replyMux      // answers to this node's command requests
	newest    newest        // which of a device's sessions is the newest
	setupWork workPool      // connect-time work off the sockets' stacks (session.go)
	tokenDevs tokenCache    // device token hash → device id (connect.go)
	clientIDs tokenCache    // client token hash → token id (tokens.go)
	clientRec clientCache   // client token id → who it speaks for, embedded NATS only (tokens.go)
	mux       *http.ServeMux
	metrics   *metrics // this node's Prometheus registry (metrics.go)

	mu       sync.Mutex
	closing  bool
	stopped  bool                            // Run has returned: NATS is gone
	sessions map[string]*session             // by session id
	byDev    map[string][]*session           // by device id (usually one)
	bySub    map[*nats.Subscription]*session // command subscription → session
	revoked  map[string]time.Time            // devices revoked lately (noteRevoked)
	// unwritten: ended sessions whose offline write failed, by device,
	// written again each heartbeat (retryOffline)
	unwritten map[string]offlineRetry

	startTook atomic.Int64 // nanoseconds from Run's start to ready (roomrelay_hub_start_seconds)
	// incarnation names this run of the node: its liveness record's
	// Started, and the node_started of every presence record it writes, so
	// a reader tells a record of an earlier run of a restarted node (which
	// crashed without writing offline) from one of the run that beats now.
	incarnation  time.Time
	waitsParked  atomic.Int64 // WaitProposal calls waiting now
	waitsStarted atomic.Int64 // ever, for tests
	sessWG       sync.WaitGroup
	reqWG        sync.WaitGroup // HTTP handlers, including agent sockets
	emptyCh      chan struct{}  // closed when sessions becomes empty while closing
	dirChurn     *churnLimiter  // room entries each device removed lately (directory.go)
}

// New checks cfg and returns a hub that is not yet running.
func New(cfg Config) (*Hub, error) {
	c, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	h := &Hub{
		cfg:       c,
		log:       c.Logger.With("node", c.NodeName),
		ready:     make(chan struct{}),
		sessions:  make(map[string]*session),
		byDev:     make(map[string][]*session),
		bySub:     make(map[*nats.Subscription]*session),
		enrollLim: newFailLimiter(c.EnrollFailures, c.EnrollWindow, c.Now),
		dir:       newMirror(),
		dirChurn:  newChurnLimiter(relay.MaxDirectoryRooms, dirMarkerTTL, c.Now),
		devMirror: newDeviceMirror(),
		natsBack:  newBroadcast(),
		setupWork: newWorkPool(),
	}
	h.devs = newDeviceCache(c.DeviceCacheTTL, c.Now)
	h.nodes.self = nodeKey(c.NodeName)
	h.upgrader = websocket.Upgrader{
		Subprotocols:     []string{relay.Subprotocol},
		HandshakeTimeout: 10 * time.Second,
		// Small buffers: most frames are small, and memory per agent is what
		// bounds a node. The read buffer lives as long as the socket, and
		// gorilla reads a frame larger than it straight into the message,
		// so it only has to hold a header and a control frame (at most 125
		// bytes of payload): 256, not 1024, is ~0.8 KiB less per agent.
		ReadBufferSize:  256,
		WriteBufferSize: 1024,
		WriteBufferPool: &sync.Pool{},
		// Agents are not browsers and authenticate with a bearer header a
		// browser cannot set on a websocket, so Origin carries no meaning.
		CheckOrigin: func(*http.Request) bool { return true },
	}
	h.metrics = newMetrics(h)
	h.mux = h.routes()
	return h, nil
}

// Ready is closed once NATS and the stores are up and Handler serves.
func (h *Hub) Ready() <-chan struct{} { return h.ready }

// NodeName is this node's name in presence records and logs.
func (h *Hub) NodeName() string { return h.cfg.NodeName }

// Handler serves the agent endpoint and the HTTP API (see Track).
func (h *Hub) Handler() http.Handler { return h.Track(h.mux) }

// Track wraps a handler of the caller's that uses the hub (the MCP front)
// the way Handler is wrapped: before Ready it answers 503 starting, after
// Run returned 503 shutting_down; Run waits for its requests to end, and
// their contexts end when Run's does, so long polls let shutdown proceed.
func (h *Hub) Track(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-h.ready:
		default:
			writeError(w, hubapi.CodeStarting, "this hub node is starting; retry shortly")
			return
		}
		h.mu.Lock()
		stopped := h.stopped
		if !stopped {
			h.reqWG.Add(1) // under mu, so Run's Wait (after it set stopped) sees every Add
		}
		h.mu.Unlock()
		if stopped {
			writeError(w, hubapi.CodeShuttingDown, "this hub node is shutting down; retry on another")
			return
		}
		defer h.reqWG.Done()
		ctx, cancel := context.WithCancel(r.Context())
		defer cancel()
		stop := context.AfterFunc(h.runCtx, cancel)
		defer stop()
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// setupWorkers is how many sessions set up at once on reused goroutines;
// more get goroutines of their own.
const setupWorkers = 32

func (h *Hub) readDeadline() time.Duration { return h.cfg.Heartbeat * 5 / 2 }

// staleAfter is when a reader treats an unrefreshed online record as gone:
// the read deadline plus one heartbeat of grace for the refresh itself.
func (h *Hub) staleAfter() time.Duration { return h.readDeadline() + h.cfg.Heartbeat }

// Run starts NATS (embedded or external), the stores and the command
// dispatcher, closes Ready, and serves until ctx ends; then it drains
// agents, waits for Handler's requests to end, and stops what it started.
func (h *Hub) Run(ctx context.Context) (err error) {
	began := time.Now()
	deadline := began.Add(h.cfg.StartupTimeout)
	if h.cfg.DataDir != "" {
		// In every mode: two hubs on one data dir share its admin token,
		// its node name and (embedded) its JetStream store.
		unlock, err := h.lockDataDir()
		if err != nil {
			return err
		}
		defer unlock()
	}
	if h.cfg.NATSURL == "" {
		ns, err := h.startEmbedded()
		if err != nil {
			return err
		}
		defer func() {
			ns.Shutdown()
			ns.WaitForShutdown()
		}()
		if h.nc, err = nats.Connect("", nats.InProcessServer(ns), nats.Name("roomrelay-hub "+h.cfg.NodeName)); err != nil {
			return fmt.Errorf("hub: connect to the embedded NATS server: %w", err)
		}
	} else if h.nc, err = h.connectExternal(ctx, deadline); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer h.nc.Close()

	if h.js, err = jetstream.New(h.nc); err != nil {
		return fmt.Errorf("hub: jetstream: %w", err)
	}
	if h.st, err = h.setupStore(ctx, deadline); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	h.st.countKVErrors(h.metrics) // before any use: every bucket operation counts

	// Command deliveries for all sessions share one channel and one
	// dispatcher goroutine instead of a goroutine per subscription.
	h.cmdCh = make(chan *nats.Msg, 4096)
	// Every connect on any node publishes a kick: a reconnect storm sends
	// thousands at once, and a full channel drops messages (a lost revoke).
	ctlCh := make(chan *nats.Msg, 1<<16)
	ctlSub, err := h.nc.ChanSubscribe(ctlWildcard, ctlCh)
	if err != nil {
		return fmt.Errorf("hub: subscribe %s: %w", ctlWildcard, err)
	}
	if err := h.subscribeCallCancels(); err != nil {
		return err
	}
	defer func() { _ = h.cancels.sub.Unsubscribe() }()
	if err := h.nc.Flush(); err != nil {
		return fmt.Errorf("hub: flush NATS: %w", err)
	}

	loopCtx, stopLoops := context.WithCancel(context.Background())
	defer stopLoops()
	reconnected := h.natsBack.wait() // before the watches start: see rewatch
	dirWatch, err := h.st.rooms.WatchAll(loopCtx)
	if err != nil {
		return fmt.Errorf("hub: watch the room directory: %w", err)
	}
	// Updates only: the device mirror fills on demand (devmirror.go), so
	// a start reads nothing per enrolled device.
	devWatch, err := h.st.devices.WatchAll(loopCtx, jetstream.UpdatesOnly())
	if err != nil {
		return fmt.Errorf("hub: watch the device records: %w", err)
	}
	nodeWatch, err := h.st.nodes.WatchAll(loopCtx)
	if err != nil {
		return fmt.Errorf("hub: watch node liveness: %w", err)
	}
	if err := h.replies.start(h.nc); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	defer h.replies.stop()
	beatCtx, stopBeat := context.WithCancel(context.Background())
	defer stopBeat()
	var wg, beatWG sync.WaitGroup
	if err := h.claimNodeName(ctx); err != nil {
		return fmt.Errorf("hub: %w", err)
	}
	h.incarnation = time.Now().UTC()
	beatWG.Go(func() { h.beatNodes(beatCtx) })
	wg.Go(func() { h.watchNodes(loopCtx, nodeWatch) })
	wg.Go(func() { h.dispatch(loopCtx, ctlCh) })
	wg.Go(func() { h.refreshLoop(loopCtx, reconnected) })
	wg.Go(func() { h.rewatch(loopCtx, h.st.rooms, "the room directory", dirWatch, reconnected, h.followDirectory) })
	wg.Go(func() {
		h.rewatch(loopCtx, h.st.devices, "the device records", devWatch, reconnected, h.followDevices, jetstream.UpdatesOnly())
	})
	h.setupWork.run(loopCtx, setupWorkers, &wg)

	h.runCtx = ctx
	h.startTook.Store(int64(time.Since(began)))
	close(h.ready)
	h.log.Info("hub ready", "nats", h.natsDesc(), "took", time.Since(began).Round(time.Millisecond))

	<-ctx.Done()

	h.log.Info("hub shutting down", "sessions", h.sessionCount())
	h.drainSessions()
	h.sessWG.Wait()
	h.mu.Lock()
	h.stopped = true // no request starts after this; those running end with ctx
	h.mu.Unlock()
	h.reqWG.Wait()
	stopBeat() // every session is gone: the record goes too (a clean stop)
	beatWG.Wait()
	stopLoops()
	_ = ctlSub.Unsubscribe()
	wg.Wait()
	if ferr := h.nc.FlushTimeout(2 * time.Second); ferr != nil {
		h.log.Warn("flush NATS on shutdown", "err", ferr)
	}
	return nil
}

func (h *Hub) natsDesc() string {
	if h.cfg.NATSURL == "" {
		return "embedded"
	}
	return h.cfg.NATSURL
}

func (h *Hub) startEmbedded() (*server.Server, error) {
	opts := &server.Options{
		ServerName: "roomrelay-" + h.cfg.NodeName,
		DontListen: true,
		JetStream:  true,
		StoreDir:   filepath.Join(h.cfg.DataDir, "nats"),
		NoSigs:     true,
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("hub: embedded NATS: %w", err)
	}
	ns.SetLoggerV2(natsLogger{h.log.With("component", "nats")}, false, false, false)
	ns.Start()
	if !ns.ReadyForConnections(30 * time.Second) {
		ns.Shutdown()
		ns.WaitForShutdown()
		return nil, errors.New("hub: embedded NATS did not become ready")
	}
	return ns, nil
}

// drainSessions tells every agent to reconnect after a random delay (so a
// fleet does not come back in one herd), waits briefly for them to leave,
// then closes whatever is left with 1001. A node with no live peer does
// not wait (drainAlone).
func (h *Hub) drainSessions() {
	h.mu.Lock()
	h.closing = true
	list := make([]*session, 0, len(h.sessions))
	for _, s := range h.sessions {
		list = append(list, s)
	}
	h.emptyCh = make(chan struct{})
	if len(h.sessions) == 0 {
		close(h.emptyCh)
	}
	empty := h.emptyCh
	h.mu.Unlock()

	if !h.nodes.othersAlive(time.Now()) {
		h.drainAlone(list)
		return
	}
	spread := h.cfg.DrainSpread.Milliseconds()
	for _, s := range list {
		s.send(&relay.Drain{AfterMS: rand.Int64N(spread + 1), Reason: "hub node shutting down"})
	}
	if len(list) > 0 {
		// Agents open their new session (elsewhere) within the spread, then
		// close this one: make-before-break. Until then it keeps serving.
		t := time.NewTimer(h.cfg.DrainSpread + h.cfg.DrainGrace)
		select {
		case <-empty:
		case <-t.C:
		}
		t.Stop()
	}
	for _, s := range list {
		s.closeWith(relay.CloseGoingAway, "hub node shutting down; reconnect")
	}
}

func (h *Hub) isClosing() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.closing
}

func (h *Hub) sessionCount() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.sessions)
}

// register adds a session unless the hub is shutting down (errClosing)
// or the device was revoked since its token was checked (errRevokedToken).
func (h *Hub) register(s *session) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closing {
		return errClosing
	}
	if _, ok := h.revoked[s.dev]; ok {
		return errRevokedToken
	}
	h.sessions[s.id] = s
	h.byDev[s.dev] = append(h.byDev[s.dev], s)
	h.sessWG.Add(1)
	return nil
}

func (h *Hub) unregister(s *session) {
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.sessions, s.id)
	if s.sub != nil {
		delete(h.bySub, s.sub)
	}
	if rest := slices.DeleteFunc(h.byDev[s.dev], func(o *session) bool { return o == s }); len(rest) > 0 {
		h.byDev[s.dev] = rest
	} else {
		delete(h.byDev, s.dev)
		h.newest.forget(s.dev)
	}
	if h.closing && len(h.sessions) == 0 && h.emptyCh != nil {
		select {
		case <-h.emptyCh:
		default:
			close(h.emptyCh)
		}
	}
}

// localSessions returns this node's sessions of one device.
func (h *Hub) localSessions(dev string) []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(h.byDev[dev])
}

func (h *Hub) allSessions() []*session {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]*session, 0, len(h.sessions))
	for _, s := range h.sessions {
		out = append(out, s)
	}
	return out
}

// refreshLoop, every heartbeat: rewrites the presence of local sessions
// whose record is presenceRefresh old, writes again the offline records
// that failed, and drops pending commands whose requester has long given
// up. After a NATS reconnect it rewrites every local session's record at
// once: a kick published while this node was cut off never reached it, and
// the compare-and-set of a session a newer one superseded fails and closes
// it (what the per-heartbeat rewrite used to catch within a heartbeat).
func (h *Hub) refreshLoop(ctx context.Context, reconnected <-chan struct{}) {
	t := time.NewTicker(h.cfg.Heartbeat)
	defer t.Stop()
	for {
		all := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-reconnected:
			reconnected = h.natsBack.wait() // before the writes: a later reconnect is seen
			all = true
		}
		h.refreshTick(ctx, all)
	}
}

// refreshTick is one heartbeat's work; all rewrites every session's
// presence, not only those due.
func (h *Hub) refreshTick(ctx context.Context, all bool) {
	for _, s := range h.allSessions() {
		if ctx.Err() != nil {
			return
		}
		s.refreshPresence(ctx, all)
		s.sweepPending()
	}
	h.retryOffline(ctx)
}

// natsLogger sends the embedded server's logs to slog.
type natsLogger struct{ l *slog.Logger }

func (n natsLogger) Noticef(f string, a ...any) { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n natsLogger) Warnf(f string, a ...any)   { n.l.Warn(fmt.Sprintf(f, a...)) }
func (n natsLogger) Fatalf(f string, a ...any)  { n.l.Error(fmt.Sprintf(f, a...)) }
func (n natsLogger) Errorf(f string, a ...any)  { n.l.Error(fmt.Sprintf(f, a...)) }
func (n natsLogger) Debugf(f string, a ...any)  { n.l.Debug(fmt.Sprintf(f, a...)) }
func (n natsLogger) Tracef(f string, a ...any)  {}

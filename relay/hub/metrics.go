package hub

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strconv"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// This file is the hub's Prometheus metrics (docs/metrics.md lists them).
// Each Hub has its own registry, not the global default: tests run many
// hubs in one process, and a program mounting the hub keeps the default
// registry to itself. Every label takes values from a closed set, so what
// a remote party sends cannot grow the number of series.

type metrics struct {
	reg     *prometheus.Registry
	handler http.Handler

	sessionsOpened prometheus.Counter
	sessionsClosed *prometheus.CounterVec   // code
	commands       *prometheus.CounterVec   // command, outcome
	commandSeconds *prometheus.HistogramVec // command
	enrollments    *prometheus.CounterVec   // outcome
	kvErrors       *prometheus.CounterVec   // bucket, op
	connectReads   *prometheus.CounterVec   // source
	copyLoads      *prometheus.CounterVec   // bucket
	staleReads     *prometheus.CounterVec   // bucket
	events         *prometheus.CounterVec   // kind, handling
}

// eventKinds are the event kinds the events metric names; any other kind
// counts as "other", so a device cannot grow the series.
var eventKinds = []string{relay.EventRoomsChanged, relay.EventPolicyChanged, relay.EventProviderChanged,
	relay.EventAuditHead, relay.EventProposalDecided, relay.EventSleeping, "other"}

// How the hub handled an agent's event (session_events.go).
const (
	evApplied  = "applied"  // applied on arrival
	evWaited   = "waited"   // past the budget: kept to apply later, the newest of its kind
	evReplaced = "replaced" // arrived while one of its kind waited, and took its place
	evSlowed   = "slowed"   // past the budget: the reader waited for the budget, then applied it
	evDropped  = "dropped"  // too large, or past the budget and of a kind the hub does not use
)

// commandBuckets span a local round trip (under a millisecond) to
// MaxCommandTimeout.
var commandBuckets = []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60}

// enrollOutcomes are the outcomes Enroll can end with, created at zero so
// a rate() over them has a series from the start.
var enrollOutcomes = []string{"ok", "project_added", hubapi.CodeRateLimited, hubapi.CodeInvalidRequest,
	hubapi.CodePairingCodeUnknown, hubapi.CodePairingCodeUsed, hubapi.CodePairingCodeExpired, hubapi.CodeInvalidToken, hubapi.CodeRevoked, hubapi.CodeUnavailable}

func newMetrics(h *Hub) *metrics {
	m := &metrics{
		reg: prometheus.NewRegistry(),
		sessionsOpened: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "roomrelay_hub_sessions_opened_total",
			Help: "Agent sessions this node accepted (after hello).",
		}),
		sessionsClosed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_sessions_closed_total",
			Help: "Agent sessions that ended on this node, by websocket close code (1006: no close frame).",
		}, []string{"code"}),
		commands: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_commands_total",
			Help: "Commands that entered this node, by command and outcome (ok or the relay error code).",
		}, []string{"command", "outcome"}),
		commandSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "roomrelay_hub_command_duration_seconds",
			Help:    "Time from a command entering this node to its result, whatever the outcome.",
			Buckets: commandBuckets,
		}, []string{"command"}),
		enrollments: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_enrollments_total",
			Help: "Enrollment attempts on this node, by outcome (ok, project_added or the refusal code).",
		}, []string{"outcome"}),
		kvErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_kv_errors_total",
			Help: "Failed KV operations (not counting key not found or a lost compare-and-set), by bucket and op.",
		}, []string{"bucket", "op"}),
		connectReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_connect_device_reads_total",
			Help: "Device records read to authenticate an agent's connect, by source: mirror (this node's copy, filled on demand and kept current by a watch) or bucket (rr_devices, when the mirror does not hold the device: its first connect since the node started).",
		}, []string{"source"}),
		copyLoads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_bucket_copy_loads_total",
			Help: "Times this node loaded its in-memory copy of rr_rooms, or began following rr_devices, from a new watch: once at start, then after each NATS reconnect.",
		}, []string{"bucket"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_events_total",
			Help: "Agents' events on this node, by kind and how the hub handled them: applied, waited (past the event budget; the newest of its kind applied later), replaced (arrived while one of its kind waited and took its place), slowed (the reader waited for the budget), dropped.",
		}, []string{"kind", "handling"}),
		staleReads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "roomrelay_hub_kv_stale_reads_total",
			Help: "Reads of a replicated bucket that a replica answered \"not found\" and the stream leader found (a write from another node not yet applied there), by bucket.",
		}, []string{"bucket"}),
	}
	for _, o := range enrollOutcomes {
		m.enrollments.WithLabelValues(o)
	}
	for _, src := range []string{"mirror", "bucket"} {
		m.connectReads.WithLabelValues(src)
	}
	for _, b := range []string{bucketDevices, bucketRooms} {
		m.copyLoads.WithLabelValues(b)
	}
	m.reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.sessionsOpened, m.sessionsClosed, m.commands, m.commandSeconds, m.enrollments, m.kvErrors, m.connectReads, m.copyLoads, m.staleReads, m.events,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomrelay_hub_mirrored_devices",
			Help: "Device records in this node's mirror of rr_devices (it starts empty with each new watch and fills on demand: devices that connected here, records changed since).",
		}, func() float64 { return float64(h.devMirror.len()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomrelay_hub_start_seconds",
			Help: "How long this node's start took, from Run to ready (the embedded NATS server and its JetStream restore, the buckets, the watches).",
		}, func() float64 { return time.Duration(h.startTook.Load()).Seconds() }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomrelay_hub_sessions",
			Help: "Agent sessions on this node now (connected devices; a device taking over from an older session briefly counts twice).",
		}, func() float64 { return float64(h.sessionCount()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomrelay_hub_proposal_waits",
			Help: "Long polls for a proposal's decision parked on this node now.",
		}, func() float64 { return float64(h.ProposalWaits()) }),
		// Read at scrape time from the connection itself: no hook in Run to
		// keep in step with the reconnect logic.
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "roomrelay_hub_nats_connected",
			Help: "1 while this node's NATS connection is up, else 0 (also before the hub is ready).",
		}, func() float64 {
			if nc := h.readyConn(); nc != nil && nc.Status() == nats.CONNECTED {
				return 1
			}
			return 0
		}),
		prometheus.NewCounterFunc(prometheus.CounterOpts{
			Name: "roomrelay_hub_nats_reconnects_total",
			Help: "Times this node's NATS connection reconnected.",
		}, func() float64 {
			if nc := h.readyConn(); nc != nil {
				return float64(nc.Stats().Reconnects)
			}
			return 0
		}),
	)
	m.handler = promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{Registry: m.reg})
	return m
}

// MetricsHandler serves this node's metrics in the Prometheus exposition
// format, without any authentication: the hub's own mux serves it at
// /metrics behind the admin token; a caller may serve it on an internal
// listener of its own.
func (h *Hub) MetricsHandler() http.Handler { return h.metrics.handler }

// readyConn is the NATS connection once Run has set it up, else nil. Ready
// is what orders Run's write of h.nc before a scrape's read.
func (h *Hub) readyConn() *nats.Conn {
	select {
	case <-h.ready:
		return h.nc
	default:
		return nil
	}
}

func (m *metrics) sessionOpened() { m.sessionsOpened.Inc() }

// event counts one agent event by kind (a closed set) and handling.
func (m *metrics) event(kind, handling string) {
	if !slices.Contains(eventKinds, kind) {
		kind = "other"
	}
	m.events.WithLabelValues(kind, handling).Inc()
}

func (m *metrics) connectRead(source string) { m.connectReads.WithLabelValues(source).Inc() }

func (m *metrics) copyLoaded(bucket string) { m.copyLoads.WithLabelValues(bucket).Inc() }

// sessionClosed counts a session's end: the close code this node sent if it
// closed the session, else the one the agent sent, else 1006 (no close
// frame: a dropped connection, a missed heartbeat, a failed write).
func (m *metrics) sessionClosed(sent int, readErr error) {
	code := sent
	if code == 0 {
		code = websocket.CloseAbnormalClosure
		var ce *websocket.CloseError
		if errors.As(readErr, &ce) {
			code = ce.Code
		}
	}
	m.sessionsClosed.WithLabelValues(closeCodeLabel(code)).Inc()
}

// closeCodeLabel bounds the code label: the standard range and relay's
// own codes as numbers, anything else an agent may send as "other".
func closeCodeLabel(code int) string {
	switch {
	case code >= 1000 && code <= 1015,
		code == relay.CloseVersion, code == relay.CloseRevoked, code == relay.CloseReplaced, code == relay.CloseHeartbeatMissed:
		return strconv.Itoa(code)
	}
	return "other"
}

// commandDone counts one (*Hub).Command call and its duration.
func (m *metrics) commandDone(name string, res *relay.Result, took time.Duration) {
	if !relay.KnownCommand(name) {
		name = "unknown"
	}
	outcome := string(relay.CodeInternal)
	switch {
	case res != nil && res.OK:
		outcome = "ok"
	case res != nil && res.Error != nil && res.Error.Code.Valid():
		outcome = string(res.Error.Code)
	}
	m.commands.WithLabelValues(name, outcome).Inc()
	m.commandSeconds.WithLabelValues(name).Observe(took.Seconds())
}

// enrollDone counts one (*Hub).Enroll call: ok, project_added (a device
// token added a project), or the code the API answers the refusal with.
func (m *metrics) enrollDone(added bool, err error) {
	outcome := "ok"
	var he *Error
	var ue *unavailableError
	switch {
	case err == nil && added:
		outcome = "project_added"
	case err == nil:
	case errors.As(err, &he):
		outcome = he.Code // the hub's own fixed set
	case errors.Is(err, errBadToken):
		outcome = hubapi.CodeInvalidToken
	case errors.Is(err, errRevokedToken):
		outcome = hubapi.CodeRevoked
	case errors.As(err, &ue):
		outcome = hubapi.CodeUnavailable
	default:
		outcome = "internal"
	}
	m.enrollments.WithLabelValues(outcome).Inc()
}

// countKVErrors makes every bucket of st count its failed operations, and
// a replicated bucket confirm a "not found" with the leader (kvleader.go).
// Wrapping the buckets, rather than counting at call sites, covers every
// operation, including ones added later.
func (st *store) countKVErrors(m *metrics) {
	for _, b := range buckets {
		f := b.field(st)
		if _, done := (*f).(countingKV); !done && *f != nil {
			ck := countingKV{KeyValue: *f, m: m, bucket: (*f).Bucket()}
			if st.replicated[b.name] {
				ck.leader = st.nc
			}
			*f = ck
		}
	}
}

// kvFailed reports an error that is a KV failure, not an answer: a missing
// key, a lost compare-and-set or a caller that left are the hub working.
func kvFailed(err error) bool {
	return err != nil &&
		!errors.Is(err, jetstream.ErrKeyNotFound) && !errors.Is(err, jetstream.ErrKeyDeleted) &&
		!errors.Is(err, jetstream.ErrNoKeysFound) && !isRevMismatch(err) && !errors.Is(err, context.Canceled)
}

// countingKV is a bucket that counts its failed operations.
type countingKV struct {
	jetstream.KeyValue
	m      *metrics
	bucket string
	leader *nats.Conn // set for a replicated bucket: Get confirms "not found" with the leader
}

func (k countingKV) count(op string, err error) {
	if kvFailed(err) {
		k.m.kvErrors.WithLabelValues(k.bucket, op).Inc()
	}
}

func (k countingKV) Get(ctx context.Context, key string) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.Get(ctx, key)
	if k.leader != nil && errors.Is(err, jetstream.ErrKeyNotFound) {
		if e, err = leaderGet(ctx, k.leader, k.bucket, key); err == nil {
			k.m.staleReads.WithLabelValues(k.bucket).Inc()
		}
	}
	k.count("get", err)
	return e, err
}

func (k countingKV) GetRevision(ctx context.Context, key string, rev uint64) (jetstream.KeyValueEntry, error) {
	e, err := k.KeyValue.GetRevision(ctx, key, rev)
	k.count("get", err)
	return e, err
}

func (k countingKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	r, err := k.KeyValue.Put(ctx, key, value)
	k.count("put", err)
	return r, err
}

func (k countingKV) PutString(ctx context.Context, key, value string) (uint64, error) {
	r, err := k.KeyValue.PutString(ctx, key, value)
	k.count("put", err)
	return r, err
}

func (k countingKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	r, err := k.KeyValue.Create(ctx, key, value, opts...)
	k.count("create", err)
	return r, err
}

func (k countingKV) Update(ctx context.Context, key string, value []byte, rev uint64) (uint64, error) {
	r, err := k.KeyValue.Update(ctx, key, value, rev)
	k.count("update", err)
	return r, err
}

func (k countingKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := k.KeyValue.Delete(ctx, key, opts...)
	k.count("delete", err)
	return err
}

func (k countingKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	err := k.KeyValue.Purge(ctx, key, opts...)
	k.count("purge", err)
	return err
}

func (k countingKV) Keys(ctx context.Context, opts ...jetstream.WatchOpt) ([]string, error) {
	ks, err := k.KeyValue.Keys(ctx, opts...)
	k.count("list", err)
	return ks, err
}

func (k countingKV) ListKeys(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyLister, error) {
	l, err := k.KeyValue.ListKeys(ctx, opts...)
	k.count("list", err)
	return l, err
}

func (k countingKV) ListKeysFiltered(ctx context.Context, filters ...string) (jetstream.KeyLister, error) {
	l, err := k.KeyValue.ListKeysFiltered(ctx, filters...)
	k.count("list", err)
	return l, err
}

func (k countingKV) History(ctx context.Context, key string, opts ...jetstream.WatchOpt) ([]jetstream.KeyValueEntry, error) {
	es, err := k.KeyValue.History(ctx, key, opts...)
	k.count("history", err)
	return es, err
}

func (k countingKV) Watch(ctx context.Context, keys string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.Watch(ctx, keys, opts...)
	k.count("watch", err)
	return w, err
}

func (k countingKV) WatchAll(ctx context.Context, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchAll(ctx, opts...)
	k.count("watch", err)
	return w, err
}

func (k countingKV) WatchFiltered(ctx context.Context, keys []string, opts ...jetstream.WatchOpt) (jetstream.KeyWatcher, error) {
	w, err := k.KeyValue.WatchFiltered(ctx, keys, opts...)
	k.count("watch", err)
	return w, err
}

package hub

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/websocket"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// scrapeWith GETs url with token (none if empty) and returns the status and
// the parsed families (nil unless 200).
func scrapeWith(t testing.TB, url, token string) (int, map[string]*dto.MetricFamily) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, nil
	}
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse the scrape: %v", err)
	}
	return resp.StatusCode, fams
}

// scrape reads th's /metrics with the admin token.
func (th *testHub) scrape() map[string]*dto.MetricFamily {
	th.t.Helper()
	status, fams := scrapeWith(th.t, th.URL()+"/metrics", testAdmin)
	if status != http.StatusOK {
		th.t.Fatalf("GET /metrics with the admin token: %d", status)
	}
	return fams
}

// series maps each series of family name to its value (a histogram's:
// its sample count), keyed by its labels as `k=v,k=v` in label order.
func series(fams map[string]*dto.MetricFamily, name string) map[string]float64 {
	out := map[string]float64{}
	f := fams[name]
	if f == nil {
		return out
	}
	for _, m := range f.GetMetric() {
		var kv []string
		for _, l := range m.GetLabel() {
			kv = append(kv, l.GetName()+"="+l.GetValue())
		}
		key := strings.Join(kv, ",")
		switch {
		case m.Counter != nil:
			out[key] = m.GetCounter().GetValue()
		case m.Gauge != nil:
			out[key] = m.GetGauge().GetValue()
		case m.Histogram != nil:
			out[key] = float64(m.GetHistogram().GetSampleCount())
		case m.Untyped != nil:
			out[key] = m.GetUntyped().GetValue()
		}
	}
	return out
}

// value is the one unlabelled series of name, or -1 if there is none.
func value(fams map[string]*dto.MetricFamily, name string) float64 {
	if v, ok := series(fams, name)[""]; ok {
		return v
	}
	return -1
}

func wantSeries(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]float64) {
	t.Helper()
	got := series(fams, name)
	if fmt.Sprint(got) != fmt.Sprint(want) { // fmt sorts map keys
		t.Errorf("%s:\n got %v\nwant %v", name, got, want)
	}
}

// waitMetric scrapes until name's series labels has value want.
func (th *testHub) waitMetric(name, labels string, want float64) {
	th.t.Helper()
	var got map[string]float64
	deadline := time.Now().Add(20 * time.Second)
	for {
		got = series(th.scrape(), name)
		if v, ok := got[labels]; ok && v == want {
			return
		}
		if time.Now().After(deadline) {
			th.t.Fatalf("%s{%s}: want %v, have %v", name, labels, want, got)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestMetricsScrape drives sessions, commands and enrollments through a
// real hub and checks the exact counts /metrics reports for each, and that
// /metrics needs the admin token.
func TestMetricsScrape(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	ctx := context.Background()

	for _, tok := range []string{"", "rra_wrong"} {
		if status, _ := scrapeWith(t, th.URL()+"/metrics", tok); status != http.StatusUnauthorized {
			t.Errorf("GET /metrics with token %q: %d, want 401", tok, status)
		}
	}
	for _, b := range buckets {
		if _, ok := (*b.field(th.st)).(countingKV); !ok {
			t.Errorf("bucket %s does not count its errors", b.name)
		}
	}

	// Enrollments: a good one, a project added with the device's token, and
	// three refusals.
	dev, tok := th.enroll("p1")
	pc, err := th.cl.Pair(ctx, "p2", 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := th.cl.Enroll(ctx, pc.Code, "", "", tok); err != nil {
		t.Fatalf("add a project: %v", err)
	}
	for _, code := range []string{pc.Code, "ZZZZ-ZZZZ", "nope"} {
		if _, err := th.cl.Enroll(ctx, code, "x", "linux", ""); err == nil {
			t.Fatalf("enrollment with %q succeeded", code)
		}
	}

	// Sessions: one the agent closes with 1000, one the hub replaces (4009),
	// one dropped without a close frame (1006).
	a := dialAgent(t, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitMetric("roomrelay_hub_sessions", "", 1)
	th.roundTrip(dev)
	if res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: "no_such_command"}); res.Error == nil || res.Error.Code != relay.CodeCommandNotAllowed {
		t.Fatalf("unknown command: %+v", res)
	}
	if err := a.conn.WriteControl(websocket.CloseMessage, websocket.FormatCloseMessage(websocket.CloseNormalClosure, "bye"), time.Now().Add(5*time.Second)); err != nil {
		t.Fatal(err)
	}
	th.waitMetric("roomrelay_hub_sessions_closed_total", "code=1000", 1)
	th.waitMetric("roomrelay_hub_sessions", "", 0)
	if res, _ := th.command(dev, hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom}); res.Error == nil || res.Error.Code != relay.CodeDeviceOffline {
		t.Fatalf("command to an offline device: %+v", res)
	}

	// The older session does not read, so it never echoes the hub's close:
	// the code counted is the one the hub sent.
	old := dialAgent(t, th.wsURL(), tok, dev)
	th.waitMetric("roomrelay_hub_sessions", "", 1)
	// Online, not only registered: of two sessions setting up at once the
	// one whose presence write lands last wins, whichever dialed first.
	th.waitState(dev, hubapi.StateOnline)
	dropped := dialAgent(t, th.wsURL(), tok, dev)
	th.waitMetric("roomrelay_hub_sessions_closed_total", "code=4009", 1)
	if code, txt := readClose(t, old.conn); code != relay.CloseReplaced {
		t.Fatalf("older session closed with %d %q, want %d", code, txt, relay.CloseReplaced)
	}
	dropped.conn.UnderlyingConn().Close()
	th.waitMetric("roomrelay_hub_sessions_closed_total", "code=1006", 1)
	th.waitMetric("roomrelay_hub_sessions", "", 0)

	fams := th.scrape()
	if v := value(fams, "roomrelay_hub_sessions_opened_total"); v != 3 {
		t.Errorf("sessions opened: %v, want 3", v)
	}
	wantSeries(t, fams, "roomrelay_hub_sessions_closed_total", map[string]float64{"code=1000": 1, "code=1006": 1, "code=4009": 1})
	wantSeries(t, fams, "roomrelay_hub_commands_total", map[string]float64{
		"command=read_room,outcome=ok":                1,
		"command=read_room,outcome=device_offline":    1,
		"command=unknown,outcome=command_not_allowed": 1,
	})
	wantSeries(t, fams, "roomrelay_hub_command_duration_seconds", map[string]float64{"command=read_room": 2, "command=unknown": 1})
	wantEnroll := map[string]float64{}
	for _, o := range enrollOutcomes {
		wantEnroll["outcome="+o] = 0
	}
	for _, o := range []string{"ok", "project_added", "pairing_code_used", "pairing_code_unknown", "invalid_request"} {
		wantEnroll["outcome="+o] = 1
	}
	wantSeries(t, fams, "roomrelay_hub_enrollments_total", wantEnroll)
	if v := value(fams, "roomrelay_hub_nats_connected"); v != 1 {
		t.Errorf("nats_connected: %v, want 1", v)
	}
	if v := value(fams, "roomrelay_hub_nats_reconnects_total"); v != 0 {
		t.Errorf("nats_reconnects_total: %v, want 0", v)
	}
	wantSeries(t, fams, "roomrelay_hub_kv_errors_total", map[string]float64{})
	if value(fams, "go_goroutines") <= 0 {
		t.Error("no Go runtime metrics")
	}
}

// TestMetricsNATSReconnect: with an external NATS server that goes away and
// comes back, nats_connected follows it, a KV read that failed meanwhile is
// counted, and the reconnect is counted.
func TestMetricsNATSReconnect(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: dir, NoSigs: true, NoLog: true}
	ns := startNATS(t, opts)
	opts.Port = ns.Addr().(*net.TCPAddr).Port
	th := startHub(t, Config{NATSURL: ns.ClientURL()})
	th.waitMetric("roomrelay_hub_nats_connected", "", 1)

	ns.Shutdown()
	ns.WaitForShutdown()
	th.waitMetric("roomrelay_hub_nats_connected", "", 0)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	_, err := th.Device(ctx, "dev-absent")
	cancel()
	var ue *unavailableError
	if !errors.As(err, &ue) {
		t.Fatalf("device read with NATS down: %v, want unavailable", err)
	}
	th.waitMetric("roomrelay_hub_kv_errors_total", "bucket=rr_devices,op=get", 1)

	startNATS(t, opts) // same port and store
	th.waitMetric("roomrelay_hub_nats_connected", "", 1)
	th.waitMetric("roomrelay_hub_nats_reconnects_total", "", 1)
	th.stop() // while NATS is up: cleanups would stop this server first
}

func startNATS(t *testing.T, opts *server.Options) *server.Server {
	t.Helper()
	ns, err := server.NewServer(opts)
	if err != nil {
		t.Fatal(err)
	}
	ns.Start()
	if !ns.ReadyForConnections(20 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

// TestMetricsKVErrorsAreFailures: a bucket counts what failed, not what a
// caller expects (a missing key, a lost compare-and-set, a caller gone).
func TestMetricsKVErrorsAreFailures(t *testing.T) {
	t.Parallel()
	m := newMetrics(&Hub{ready: make(chan struct{})})
	var next error
	kv := countingKV{KeyValue: failingKV{err: &next}, m: m, bucket: "rr_test"}
	ctx := context.Background()
	for _, err := range []error{nil, jetstream.ErrKeyNotFound, jetstream.ErrKeyExists, jetstream.ErrKeyRevisionMismatch,
		fmt.Errorf("update: %w", jetstream.ErrKeyRevisionMismatch), context.Canceled} {
		next = err
		kv.Get(ctx, "k")
		kv.Update(ctx, "k", nil, 1)
		kv.Create(ctx, "k", nil)
	}
	next = fmt.Errorf("look up: %w", context.DeadlineExceeded)
	kv.Get(ctx, "k")
	next = nats.ErrConnectionClosed
	kv.Update(ctx, "k", nil, 1)
	kv.Update(ctx, "k", nil, 1)

	rec := httptest.NewRecorder()
	m.handler.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(rec.Body)
	if err != nil {
		t.Fatal(err)
	}
	wantSeries(t, fams, "roomrelay_hub_kv_errors_total", map[string]float64{
		"bucket=rr_test,op=get":    1,
		"bucket=rr_test,op=update": 2,
	})
}

// TestMetricsCloseCodeLabel: the code label keeps a closed set.
func TestMetricsCloseCodeLabel(t *testing.T) {
	t.Parallel()
	for code, want := range map[int]string{1000: "1000", 1001: "1001", 1006: "1006", 4003: "4003", 4009: "4009",
		999: "other", 3000: "other", 4002: "other", 4999: "other"} {
		if got := closeCodeLabel(code); got != want {
			t.Errorf("closeCodeLabel(%d) = %q, want %q", code, got, want)
		}
	}
	if !slices.Contains(enrollOutcomes, "rate_limited") {
		t.Error("rate_limited is not a pre-created enrollment outcome")
	}
}

// failingKV answers every operation with *err.
type failingKV struct {
	jetstream.KeyValue
	err *error
}

func (f failingKV) Get(context.Context, string) (jetstream.KeyValueEntry, error) { return nil, *f.err }
func (f failingKV) Update(context.Context, string, []byte, uint64) (uint64, error) {
	return 0, *f.err
}
func (f failingKV) Create(context.Context, string, []byte, ...jetstream.KVCreateOpt) (uint64, error) {
	return 0, *f.err
}

// TestMetricsStartSeconds: a ready node says how long its start took.
func TestMetricsStartSeconds(t *testing.T) {
	t.Parallel()
	th := startHub(t, Config{})
	if v := series(th.scrape(), "roomrelay_hub_start_seconds")[""]; v <= 0 {
		t.Fatalf("roomrelay_hub_start_seconds = %v once ready, want > 0", v)
	}
}

//go:build linux

// Command storm measures a reconnect storm against one hub: N enrolled
// devices connected as raw protocol clients (a real websocket with the
// roomrelay.v1 subprotocol, the real hello/welcome, pings answered, drain
// obeyed and the agent's full-jitter backoff; not full agents: no policy,
// store or audit log), then the hub killed with SIGKILL and restarted on the
// same data dir and port, then the same with a graceful restart (SIGTERM:
// the hub drains). Before the clients connect the hub is restarted once
// with every device enrolled and none connected: its ready time and Go heap
// over the empty hub's give the start's cost and the memory per enrolled
// device. It reports hub memory per idle agent at the -mem counts,
// and per restart the time until each client is online again (its next
// welcome) as p50/p95/max, how many gave up (must be 0), how many dials a
// hub answered 503 (the old one draining or the new one starting), how wide
// the clients' first redials after the signal spread (p5–p95: a herd is a
// narrow spread), and the new hub's CPU seconds and peak RSS during the
// recovery. Linux only (/proc), loopback
// only, bounded by -timeout. Not part of the test suite.
//
//	go run ./bench/storm -agents 2000 [-restart kill|drain|both|none] [-mem 1000,5000] [-json]
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/roomrelay/roomrelay/bench/internal/benchutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
)

const (
	project    = "storm"
	adminToken = "rra_storm-bench-admin-token-0123456789abcdef"
)

func main() {
	agents := flag.Int("agents", 2000, "devices (raw protocol clients), 1–20000")
	restart := flag.String("restart", "both", "restarts to measure: kill, drain, both or none")
	memAt := flag.String("mem", "1000,5000", "connected counts to measure hub memory at (those up to -agents; -agents itself always)")
	heartbeat := flag.Duration("heartbeat", 25*time.Second, "hub --heartbeat (the default: idle agents as deployed)")
	timeout := flag.Duration("timeout", 5*time.Minute, "bound on the whole run")
	settle := flag.Duration("settle", 0, "after the last -mem count, leave the agents idle this long and measure memory again (the runtime returns what the connects allocated over minutes)")
	asJSON := flag.Bool("json", false, "print the report as JSON")
	keep := flag.Bool("keep", false, "keep the work directory (hub log, data dir)")
	flag.StringVar(&hubLogLevel, "log-level", "warn", "the hub's --log-level (info or debug time its start in the kept hub log: -keep)")
	flag.StringVar(&hubEnv, "hub-env", "", "comma-separated KEY=VALUE added to the hub's environment (GOGC=50, GOMEMLIMIT=512MiB: the collector's headroom is most of RSS per agent)")
	flag.StringVar(&hubBin, "bin", "", "run this prebuilt roomrelay (full build) as the hub instead of building cmd/roomrelay: an earlier commit's, or to skip a build that takes minutes on a loaded machine")
	flag.Parse()
	modes, err := parseModes(*restart)
	if err != nil || *agents < 1 || *agents > 20000 {
		fmt.Fprintln(os.Stderr, "storm: want -agents 1–20000 and -restart kill, drain, both or none")
		os.Exit(2)
	}
	marks, err := parseMarks(*memAt, *agents)
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm: -mem:", err)
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep, err := run(ctx, *agents, modes, marks, *heartbeat, *settle, *keep)
	if rep != nil {
		if *asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			_ = enc.Encode(rep)
		} else {
			rep.print()
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "storm:", err)
		os.Exit(1)
	}
}

func parseModes(s string) ([]string, error) {
	switch s {
	case "both":
		return []string{"kill", "drain"}, nil
	case "kill", "drain":
		return []string{s}, nil
	case "none":
		return nil, nil
	}
	return nil, fmt.Errorf("unknown -restart %q", s)
}

func parseMarks(s string, n int) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		k, err := strconv.Atoi(f)
		if err != nil || k < 1 {
			return nil, fmt.Errorf("%q is not a count", f)
		}
		if k <= n {
			out = append(out, k)
		}
	}
	out = append(out, n)
	slices.Sort(out)
	return slices.Compact(out), nil
}

// hubBin is -bin: a prebuilt hub binary, or "" to build one.
var hubBin string

// hubLogLevel is -log-level, the hub's.
var hubLogLevel string

// hubEnv is -hub-env, added to the hub's environment.
var hubEnv string

// Report is what a run measured (the -json output).
type Report struct {
	Agents       int     `json:"agents"`
	Clients      string  `json:"clients"`
	HubHeartbeat string  `json:"hub_heartbeat"`
	HubEnv       string  `json:"hub_env,omitempty"`
	NofileLimit  uint64  `json:"rlimit_nofile"`
	CPUs         int     `json:"cpus"`
	EnrollSecs   float64 `json:"enroll_seconds"`
	// Enrolled is the hub restarted (SIGTERM, nothing connected) with every
	// device enrolled: its start and what the enrolled devices cost it.
	Enrolled EnrolledPoint `json:"enrolled"`
	Memory   []MemPoint    `json:"memory"`
	Storms   []StormPoint  `json:"storms"`
}

// EnrolledPoint is a hub with Devices enrolled and none connected, after a
// restart (so nothing the enrollments left behind is counted), beside the
// same hub empty (before any enrollment).
type EnrolledPoint struct {
	Devices        int     `json:"devices"`
	EmptyRSSKiB    int64   `json:"empty_rss_kib"`
	EmptyHeapBytes int64   `json:"empty_heap_inuse_bytes"`
	RSSKiB         int64   `json:"rss_kib"`
	HeapBytes      int64   `json:"heap_inuse_bytes"`
	PerDeviceHeapB float64 `json:"per_device_heap_bytes"`
	PerDeviceRSSB  float64 `json:"per_device_rss_bytes"`
	ReadyMS        int64   `json:"ready_ms"`     // from the new process's start to /v1/readyz 200
	StartMS        int64   `json:"hub_start_ms"` // the hub's own: Run to ready (roomrelay_hub_start_seconds)
}

// MemPoint is the hub's memory with Connected idle agents.
type MemPoint struct {
	Connected     int     `json:"connected"`
	IdleSecs      float64 `json:"idle_seconds,omitempty"` // measured after the agents were idle this long (-settle)
	RSSKiB        int64   `json:"rss_kib"`
	PerAgentKiB   float64 `json:"per_agent_kib"` // (RSS - RSS at 0) / connected
	HeapBytes     int64   `json:"heap_inuse_bytes,omitempty"`
	PerAgentHeapB float64 `json:"per_agent_heap_bytes,omitempty"`
}

// StormPoint is one restart and the recovery after it.
type StormPoint struct {
	Mode      string `json:"mode"` // kill (SIGKILL) or drain (SIGTERM)
	OldExitMS int64  `json:"old_hub_exit_ms"`
	ReadyMS   int64  `json:"new_hub_ready_ms"` // from the signal until the bench's readyz poll was answered
	// HubReadyMS is from the signal until the new hub was ready by its own
	// account: its process started, plus its start (roomrelay_hub_start_seconds).
	// The readyz answer comes later under a storm: the poll waits in the
	// listen backlog behind every client's dial.
	HubReadyMS   int64 `json:"hub_ready_ms"`
	StartMS      int64 `json:"hub_start_ms"`
	P50MS        int64 `json:"p50_ms"`
	P95MS        int64 `json:"p95_ms"`
	MaxMS        int64 `json:"max_ms"`
	Back         int   `json:"back"`
	GaveUp       int   `json:"gave_up"`
	NotBack      int   `json:"not_back"`
	DialFailures int64 `json:"dial_failures"`
	Refused503   int64 `json:"refused_503"` // dials answered 503 (the old hub draining, or the new one starting)
	// FirstDialP5MS..P95MS is the spread of each client's first reconnect
	// attempt after the signal: a herd is a narrow spread.
	FirstDialP5MS  int64   `json:"first_dial_p5_ms"`
	FirstDialP95MS int64   `json:"first_dial_p95_ms"`
	Drains         int64   `json:"drain_frames"`
	HubCPUSeconds  float64 `json:"hub_cpu_seconds"`
	HubPeakRSSKiB  int64   `json:"hub_peak_rss_kib"`
}

type bench struct {
	dir, bin, home, addr, url string
	hubArgs                   []string
	hub                       *hubProc
	clients                   []*client
	cancelClients             context.CancelFunc
	wg                        sync.WaitGroup
}

func run(ctx context.Context, n int, modes []string, marks []int, heartbeat, settle time.Duration, keep bool) (*Report, error) {
	if runtime.GOOS != "linux" {
		return nil, errors.New("linux only (it reads /proc)")
	}
	rep := &Report{Agents: n, HubHeartbeat: heartbeat.String(), HubEnv: hubEnv, CPUs: runtime.NumCPU(),
		Clients: "raw protocol clients (real websocket, hello/welcome, pings, drain, the agent's full-jitter backoff 1s..60s), not full agents"}
	rep.NofileLimit = raiseNofile()
	if need := uint64(n + 512); rep.NofileLimit < need {
		return nil, fmt.Errorf("RLIMIT_NOFILE is %d (hard limit), %d agents need about %d: raise `ulimit -Hn`", rep.NofileLimit, n, need)
	}
	dir, err := os.MkdirTemp("", "roomrelay-storm-")
	if err != nil {
		return nil, err
	}
	b := &bench{dir: dir, bin: filepath.Join(dir, "roomrelay"), home: filepath.Join(dir, "home")}
	if keep {
		logf("work directory kept: %s", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	if hubBin != "" {
		b.bin = hubBin
	} else {
		logf("building roomrelay")
		if out, err := exec.CommandContext(ctx, "go", "build", "-o", b.bin, "github.com/roomrelay/roomrelay/cmd/roomrelay").CombinedOutput(); err != nil {
			return nil, fmt.Errorf("go build: %w: %s", err, out)
		}
	}
	if b.addr, err = benchutil.FreeAddr(); err != nil {
		return nil, err
	}
	b.url = "http://" + b.addr
	tokFile := filepath.Join(dir, "admin-token")
	if err := os.WriteFile(tokFile, []byte(adminToken+"\n"), 0o600); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(filepath.Join(dir, "hub"), 0o700); err != nil {
		return nil, err
	}
	b.hubArgs = []string{"hub", "--listen", b.addr, "--data-dir", filepath.Join(dir, "hub"), "--admin-token-file", tokFile,
		"--heartbeat", heartbeat.String(), "--node", "storm", "--log-level", hubLogLevel}
	if err := b.startHub(ctx); err != nil {
		return nil, b.withLog(err)
	}
	defer func() {
		if b.cancelClients != nil {
			b.cancelClients()
		}
		b.wg.Wait()
		if b.hub != nil {
			b.hub.signal(syscall.SIGTERM, 30*time.Second)
		}
	}()

	ep := EnrolledPoint{Devices: n, EmptyRSSKiB: b.settledRSS(ctx), EmptyHeapBytes: heapBytes(b.url, adminToken)}
	logf("enrolling %d devices over the HTTP API", n)
	t0 := time.Now()
	if err := b.enroll(ctx, n); err != nil {
		return rep, b.withLog(err)
	}
	rep.EnrollSecs = time.Since(t0).Seconds()

	// A restart with every device enrolled and none connected: the start's
	// cost and the memory the enrolled devices hold.
	logf("restarting the hub with %d devices enrolled, none connected", n)
	b.hub.signal(syscall.SIGTERM, 2*time.Minute)
	t1 := time.Now()
	if err := b.startHub(ctx); err != nil {
		return rep, b.withLog(err)
	}
	ep.ReadyMS, ep.StartMS = time.Since(t1).Milliseconds(), startMS(b.url, adminToken)
	ep.RSSKiB, ep.HeapBytes = b.settledRSS(ctx), heapBytes(b.url, adminToken)
	ep.PerDeviceRSSB = float64(ep.RSSKiB-ep.EmptyRSSKiB) * 1024 / float64(n)
	ep.PerDeviceHeapB = float64(ep.HeapBytes-ep.EmptyHeapBytes) / float64(n)
	rep.Enrolled = ep
	logf("restarted with %d enrolled: ready in %d ms, heap %.1f MiB (%.0f B per device over the empty hub)", n, ep.ReadyMS, float64(ep.HeapBytes)/(1<<20), ep.PerDeviceHeapB)

	// Memory: the baseline with every device enrolled and none connected,
	// then with each mark of idle agents connected.
	base, baseHeap := ep.RSSKiB, ep.HeapBytes
	rep.Memory = append(rep.Memory, MemPoint{Connected: 0, RSSKiB: base, HeapBytes: baseHeap})
	cctx, cancelClients := context.WithCancel(context.Background())
	b.cancelClients = cancelClients
	started := 0
	for _, k := range marks {
		logf("connecting clients %d..%d", started+1, k)
		for ; started < k; started++ {
			c := b.clients[started]
			b.wg.Go(func() { c.run(cctx) })
			if started%100 == 99 {
				time.Sleep(50 * time.Millisecond) // a ramp, not a storm: this phase measures idle memory
			}
		}
		if err := b.waitOnline(ctx, k, time.Time{}); err != nil {
			return rep, b.withLog(err)
		}
		rss, heap := b.settledRSS(ctx), heapBytes(b.url, adminToken)
		mp := MemPoint{Connected: k, RSSKiB: rss, PerAgentKiB: float64(rss-base) / float64(k), HeapBytes: heap}
		if heap > 0 && baseHeap > 0 {
			mp.PerAgentHeapB = float64(heap-baseHeap) / float64(k)
		}
		rep.Memory = append(rep.Memory, mp)
		logf("%d connected: hub RSS %d KiB (%.1f KiB per agent)", k, rss, mp.PerAgentKiB)
	}
	if settle > 0 {
		// Right after the ramp RSS still holds what the connects allocated
		// (the runtime returns freed pages to the OS over minutes): the
		// same count again once the agents were idle for settle.
		k := marks[len(marks)-1]
		logf("idle for %s", settle)
		select {
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(settle):
		}
		rss, heap := b.settledRSS(ctx), heapBytes(b.url, adminToken)
		mp := MemPoint{Connected: k, IdleSecs: settle.Seconds(), RSSKiB: rss, PerAgentKiB: float64(rss-base) / float64(k), HeapBytes: heap}
		if heap > 0 && baseHeap > 0 {
			mp.PerAgentHeapB = float64(heap-baseHeap) / float64(k)
		}
		rep.Memory = append(rep.Memory, mp)
		logf("%d connected, idle %s: hub RSS %d KiB (%.1f KiB per agent)", k, settle, rss, mp.PerAgentKiB)
	}

	for _, mode := range modes {
		logf("restart: %s", mode)
		sp, err := b.storm(ctx, mode)
		rep.Storms = append(rep.Storms, sp)
		if err != nil {
			return rep, b.withLog(err)
		}
		if sp.GaveUp > 0 || sp.NotBack > 0 {
			return rep, fmt.Errorf("%s: %d clients gave up, %d not back", mode, sp.GaveUp, sp.NotBack)
		}
	}
	return rep, nil
}

func (b *bench) startHub(ctx context.Context) error {
	p, err := startHub(b.bin, b.home, filepath.Join(b.dir, "hub.log"), b.hubArgs)
	if err != nil {
		return err
	}
	b.hub = p
	return waitReady(ctx, b.url, p)
}

// withLog adds the tail of the hub's log to err.
func (b *bench) withLog(err error) error {
	data, _ := os.ReadFile(filepath.Join(b.dir, "hub.log"))
	if len(data) > 4000 {
		data = data[len(data)-4000:]
	}
	return fmt.Errorf("%w\n--- hub log (tail) ---\n%s", err, data)
}

// enroll pairs and enrolls n devices with 16 workers, each from its own
// loopback source address: the hub counts an enrollment against its
// client's address before evaluating it (refunded when the code is
// valid), so more than its limit in flight from one address are refused
// even with valid codes.
func (b *bench) enroll(ctx context.Context, n int) error {
	const workers = 16
	admin := hubclient.New(b.url, adminToken)
	b.clients = make([]*client, n)
	wsURL := "ws://" + b.addr + relay.ConnectPath
	errs := make([]error, workers)
	var wg sync.WaitGroup
	for w := range workers {
		dev := hubclient.New(b.url, "")
		nd := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 2, 0, byte(1+w))}, Timeout: 10 * time.Second}
		dev.HTTP = &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: nd.DialContext}}
		wg.Go(func() {
			for i := w; i < n && ctx.Err() == nil; i += workers {
				pc, err := admin.Pair(ctx, project, 0)
				if err != nil {
					errs[w] = fmt.Errorf("pair for device %d: %w", i, err)
					return
				}
				en, err := dev.Enroll(ctx, pc.Code, "storm-"+strconv.Itoa(i), "linux", "")
				if err != nil {
					errs[w] = fmt.Errorf("enroll device %d: %w", i, err)
					return
				}
				b.clients[i] = &client{i: i, id: en.DeviceID, token: en.Token, wsURL: wsURL, src: srcAddr(i)}
			}
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return ctx.Err()
}

// settledRSS is the hub's RSS once it stopped moving: the lowest of five
// samples a second apart (the Go runtime returns freed pages lazily).
func (b *bench) settledRSS(ctx context.Context) int64 {
	var low int64
	for i := range 5 {
		if i > 0 {
			select {
			case <-ctx.Done():
				return low
			case <-time.After(time.Second):
			}
		}
		if r := benchutil.RSSKiB(b.hub.pid()); low == 0 || r < low {
			low = r
		}
	}
	return low
}

// waitOnline waits until the first k clients had a welcome after since
// (or gave up).
func (b *bench) waitOnline(ctx context.Context, k int, since time.Time) error {
	for {
		back, gave := 0, 0
		for _, c := range b.clients[:k] {
			switch {
			case c.gaveUp.Load():
				gave++
			case c.online.Load() && c.lastWelcome.Load() > since.UnixNano():
				back++
			}
		}
		if back+gave == k {
			if gave > 0 {
				return fmt.Errorf("%d clients gave up (e.g. %v)", gave, b.firstWhy())
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d of %d clients online when time ran out: %w", back, k, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *bench) firstWhy() any {
	for _, c := range b.clients {
		if c.gaveUp.Load() {
			return c.why.Load()
		}
	}
	return nil
}

// storm restarts the hub (SIGKILL, or SIGTERM and its drain) and waits
// until every client had a welcome after the signal.
func (b *bench) storm(ctx context.Context, mode string) (StormPoint, error) {
	sp := StormPoint{Mode: mode}
	var fails, drains, refused int64
	for _, c := range b.clients {
		fails, drains, refused = fails+c.dialFails.Load(), drains+c.drains.Load(), refused+c.refused503.Load()
	}
	t0 := time.Now()
	stormStart.Store(t0.UnixNano())
	if mode == "kill" {
		b.hub.signal(syscall.SIGKILL, 10*time.Second)
	} else {
		b.hub.signal(syscall.SIGTERM, 2*time.Minute)
	}
	sp.OldExitMS = time.Since(t0).Milliseconds()
	p, err := startHub(b.bin, b.home, filepath.Join(b.dir, "hub.log"), b.hubArgs)
	if err != nil {
		return sp, err
	}
	b.hub = p
	peak := sample(p.pid())
	if err := waitReady(ctx, b.url, p); err != nil {
		peak.end()
		return sp, err
	}
	sp.ReadyMS = time.Since(t0).Milliseconds()
	werr := b.waitOnline(ctx, len(b.clients), t0)
	if sp.StartMS = startMS(b.url, adminToken); sp.StartMS > 0 {
		sp.HubReadyMS = p.started.Sub(t0).Milliseconds() + sp.StartMS
	}
	sp.HubCPUSeconds, sp.HubPeakRSSKiB = cpuSeconds(p.pid()), peak.end()
	var ds, firsts []time.Duration
	for _, c := range b.clients {
		if f := c.firstDial.Load(); f > t0.UnixNano() {
			firsts = append(firsts, time.Duration(f-t0.UnixNano()))
		}
		sp.Refused503 += c.refused503.Load()
		switch w := c.lastWelcome.Load(); {
		case c.gaveUp.Load():
			sp.GaveUp++
		case w > t0.UnixNano():
			ds = append(ds, time.Duration(w-t0.UnixNano()))
		default:
			sp.NotBack++
		}
		sp.DialFailures += c.dialFails.Load()
		sp.Drains += c.drains.Load()
	}
	sp.DialFailures -= fails
	sp.Drains -= drains
	sp.Refused503 -= refused
	if len(firsts) > 0 {
		slices.Sort(firsts)
		sp.FirstDialP5MS = firsts[len(firsts)*5/100].Milliseconds()
		sp.FirstDialP95MS = firsts[min(len(firsts)-1, len(firsts)*95/100)].Milliseconds()
	}
	sp.Back = len(ds)
	if len(ds) > 0 {
		slices.Sort(ds)
		pct := func(q float64) int64 { return ds[min(len(ds)-1, int(q*float64(len(ds))))].Milliseconds() }
		sp.P50MS, sp.P95MS, sp.MaxMS = pct(0.50), pct(0.95), ds[len(ds)-1].Milliseconds()
	}
	return sp, werr
}

func (r *Report) print() {
	fmt.Printf("\nroomrelay reconnect storm: %d %s\n", r.Agents, r.Clients)
	if r.HubEnv != "" {
		fmt.Printf("hub environment: %s\n", r.HubEnv)
	}
	fmt.Printf("hub heartbeat %s, RLIMIT_NOFILE %d, %d CPUs, enrollment of %d devices %.1fs\n\n", r.HubHeartbeat, r.NofileLimit, r.CPUs, r.Agents, r.EnrollSecs)
	e := r.Enrolled
	fmt.Printf("hub restarted with %d devices enrolled and none connected: ready in %s (its start: %s); heap %.1f MiB (empty hub %.1f MiB): %.0f B per enrolled device; RSS %.0f B per device\n\n",
		e.Devices, ms(e.ReadyMS), ms(e.StartMS), float64(e.HeapBytes)/(1<<20), float64(e.EmptyHeapBytes)/(1<<20), e.PerDeviceHeapB, e.PerDeviceRSSB)
	fmt.Println("| connected idle agents | hub RSS | per agent (over 0) | Go heap in use | per agent (heap) |")
	fmt.Println("|---|---|---|---|---|")
	for _, m := range r.Memory {
		heap, per := "-", "-"
		if m.HeapBytes > 0 {
			heap = fmt.Sprintf("%.1f MiB", float64(m.HeapBytes)/(1<<20))
		}
		if m.PerAgentHeapB > 0 {
			per = fmt.Sprintf("%.1f KiB", m.PerAgentHeapB/1024)
		}
		count := strconv.Itoa(m.Connected)
		if m.IdleSecs > 0 {
			count += fmt.Sprintf(" (idle %.0f s)", m.IdleSecs)
		}
		fmt.Printf("| %s | %.1f MiB | %.1f KiB | %s | %s |\n", count, float64(m.RSSKiB)/1024, m.PerAgentKiB, heap, per)
	}
	if len(r.Storms) == 0 {
		return
	}
	fmt.Println("\ntime from the signal until each client's next welcome; hub CPU and peak RSS of the new hub process until all were back")
	fmt.Println("new hub ready: by its own account (process start + roomrelay_hub_start_seconds) / when the bench's readyz poll got through the storm's listen backlog")
	fmt.Println("| restart | old hub gone | new hub ready | p50 | p95 | max | back | gave up | not back | dial failures | of which 503 | first redial p5–p95 | drain frames | hub CPU | hub peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
	for _, s := range r.Storms {
		name := "SIGKILL + restart"
		if s.Mode == "drain" {
			name = "SIGTERM (drain) + restart"
		}
		fmt.Printf("| %s | %s | %s / %s | %s | %s | %s | %d | %d | %d | %d | %d | %s–%s | %d | %.2f s | %.1f MiB |\n", name,
			ms(s.OldExitMS), ms(s.HubReadyMS), ms(s.ReadyMS), ms(s.P50MS), ms(s.P95MS), ms(s.MaxMS), s.Back, s.GaveUp, s.NotBack,
			s.DialFailures, s.Refused503, ms(s.FirstDialP5MS), ms(s.FirstDialP95MS), s.Drains, s.HubCPUSeconds, float64(s.HubPeakRSSKiB)/1024)
	}
}

func ms(v int64) string { return (time.Duration(v) * time.Millisecond).String() }

func logf(format string, a ...any) {
	fmt.Fprintf(os.Stderr, "storm: "+format+"\n", a...)
}

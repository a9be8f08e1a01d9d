package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gorilla/websocket"

	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// The connection benchmark runs its websocket clients in a child process
// (this test binary, re-executed), so the hub's memory is measured alone.
const swarmEnv = "RR_HUB_BENCH_SWARM"

func TestMain(m *testing.M) {
	if os.Getenv(swarmEnv) == "1" {
		os.Exit(runSwarm())
	}
	os.Exit(m.Run())
}

type swarmSpec struct {
	URL     string      `json:"url"`
	Agents  [][2]string `json:"agents"`   // device id, token
	NoRooms bool        `json:"no_rooms"` // hellos without a room directory (agents before it)
}

// runSwarm connects every agent from the spec on stdin, prints "ready", and
// keeps the sockets open (answering pings) until stdin closes.
func runSwarm() int {
	raiseFileLimit()
	in := bufio.NewReader(os.Stdin)
	line, err := in.ReadBytes('\n')
	if err != nil {
		fmt.Println("error", err)
		return 1
	}
	var spec swarmSpec
	if err := json.Unmarshal(line, &spec); err != nil {
		fmt.Println("error", err)
		return 1
	}
	conns := make([]*websocket.Conn, len(spec.Agents))
	sem := make(chan struct{}, 32)
	var wg sync.WaitGroup
	var mu sync.Mutex
	var firstErr error
	for i, a := range spec.Agents {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			conn, _, err := dialRaw(spec.URL, a[1], []string{relay.Subprotocol})
			if err == nil {
				hello := helloFor(a[0])
				if !spec.NoRooms {
					hello.Rooms = []relay.RoomEntry{{Project: "p1", RoomID: fmt.Sprintf("room-%d", i), Name: fmt.Sprintf("Room %d", i)}}
				}
				b, _ := relay.Encode(hello)
				if err = conn.WriteMessage(websocket.TextMessage, b); err == nil {
					_, _, err = conn.ReadMessage() // welcome
				}
			}
			if err != nil {
				mu.Lock()
				firstErr = err
				mu.Unlock()
				return
			}
			conns[i] = conn
		})
	}
	wg.Wait()
	if firstErr != nil {
		fmt.Println("error", firstErr)
		return 1
	}
	for _, c := range conns {
		go func() {
			for {
				if _, _, err := c.ReadMessage(); err != nil {
					return
				}
			}
		}()
	}
	fmt.Println("ready", len(conns))
	_, _ = in.ReadBytes('\n') // until EOF
	return 0
}

type memSample struct{ heap, stack, rss uint64 }

func sampleMem() memSample {
	for range 3 {
		runtime.GC() // each cycle may also halve an oversized goroutine stack
	}
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	s := memSample{heap: ms.HeapInuse + ms.StackInuse, stack: ms.StackInuse}
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
				kb, _ := strconv.ParseUint(f[1], 10, 64)
				s.rss = kb << 10
			}
		}
	}
	return s
}

// benchCounts is RR_BENCH_AGENTS ("1000,5000" by default).
func benchCounts() []int {
	var out []int
	for _, f := range strings.Split(os.Getenv("RR_BENCH_AGENTS"), ",") {
		if n, err := strconv.Atoi(strings.TrimSpace(f)); err == nil && n > 0 {
			out = append(out, n)
		}
	}
	if len(out) == 0 {
		out = []int{1000, 5000}
	}
	return out
}

// connServer is what the swarm connects to: the hub, or a bare gorilla
// server that speaks just hello/welcome.
type connServer struct {
	name  string
	url   string
	live  func() int  // sockets past welcome
	ready func() bool // every live socket finished its connect-time work
}

// bareServer is the floor the hub is compared with: gorilla with the hub's
// upgrader settings, the hello read and a welcome written, then the classic
// shape, a read loop in the HTTP handler and (withWriter) a writer goroutine
// with a ping ticker. No authentication, no NATS.
func bareServer(b *testing.B, withWriter bool, heartbeat time.Duration) *connServer {
	up := websocket.Upgrader{Subprotocols: []string{relay.Subprotocol}, ReadBufferSize: 1024, WriteBufferSize: 1024,
		WriteBufferPool: &sync.Pool{}, CheckOrigin: func(*http.Request) bool { return true }}
	var live atomic.Int64
	srv := testutil.Serve(b, "", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		conn, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		defer conn.Close()
		_, data, err := conn.ReadMessage()
		if err != nil {
			return
		}
		if f, err := relay.Decode(data, relay.DefaultMaxFrame); err != nil || f.FrameType() != relay.TypeHello {
			return
		}
		wb, _ := relay.Encode(&relay.Welcome{SessionID: newID("s-"), HeartbeatMS: heartbeat.Milliseconds(), ServerTime: time.Now().UTC()})
		if conn.WriteMessage(websocket.TextMessage, wb) != nil {
			return
		}
		live.Add(1)
		defer live.Add(-1)
		if withWriter {
			stop, done := make(chan struct{}), make(chan struct{})
			send := make(chan []byte, 1)
			go func() {
				defer close(done)
				t := time.NewTicker(heartbeat)
				defer t.Stop()
				for {
					select {
					case <-stop:
						return
					case m := <-send:
						_ = conn.WriteMessage(websocket.TextMessage, m)
					case <-t.C:
						_ = conn.WriteControl(websocket.PingMessage, nil, time.Now().Add(writeWait))
					}
				}
			}()
			defer func() { close(stop); <-done }()
		}
		for {
			if _, _, err := conn.ReadMessage(); err != nil {
				return
			}
		}
	}))
	b.Cleanup(srv.Close)
	name := "bare-reader"
	if withWriter {
		name = "bare-reader+writer"
	}
	return &connServer{name: name, url: "ws://" + srv.Addr() + relay.ConnectPath,
		live: func() int { return int(live.Load()) }, ready: func() bool { return true }}
}

// hubServer is the hub under test; a session is ready once it went online
// (its epoch is the presence write's revision).
func hubServer(th *testHub) *connServer {
	return &connServer{name: "hub", url: th.wsURL(), live: th.sessionCount, ready: func() bool {
		for _, s := range th.allSessions() {
			if s.epoch.Load() == 0 {
				return false
			}
		}
		return true
	}}
}

// connResult is one swarm connected to one server.
type connResult struct {
	heapPerAgent, rssPerAgent, stackPerAgent float64 // bytes
	cpuPerConnect, wallPerConnect            time.Duration
	goroutines                               int
}

// connectSwarm connects the first n agents of spec to srv from a child
// process, measures, and disconnects them.
func connectSwarm(b *testing.B, srv *connServer, spec swarmSpec, n int) connResult {
	spec.URL, spec.Agents = srv.url, spec.Agents[:n]
	before := sampleMem()
	goBefore := runtime.NumGoroutine()
	if dir := os.Getenv("RR_BENCH_HEAPPROFILE"); dir != "" {
		// The base for `pprof -sample_index=alloc_space -base`: what the
		// connects allocated.
		writeHeapProfile(b, filepath.Join(dir, fmt.Sprintf("heap-%s-%d-before.pprof", srv.name, n)))
	}
	if dir := os.Getenv("RR_BENCH_CPUPROFILE"); dir != "" {
		f, err := os.Create(filepath.Join(dir, fmt.Sprintf("cpu-%s-%d.pprof", srv.name, n)))
		if err != nil {
			b.Fatal(err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			b.Fatal(err)
		}
	}
	cpu0 := processCPU()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), swarmEnv+"=1")
	stdin, _ := cmd.StdinPipe()
	stdout, _ := cmd.StdoutPipe()
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	start := time.Now()
	line, _ := json.Marshal(spec)
	_, _ = stdin.Write(append(line, '\n'))
	out, err := bufio.NewReader(stdout).ReadString('\n')
	if err != nil || !strings.HasPrefix(out, "ready") {
		b.Fatalf("swarm: %q %v", out, err)
	}
	waitFor(b, "all sessions set up", func() bool { return srv.live() == n && srv.ready() })
	wall := time.Since(start)
	cpu := processCPU() - cpu0
	if os.Getenv("RR_BENCH_CPUPROFILE") != "" {
		pprof.StopCPUProfile()
	}
	after := sampleMem()
	goroutines := runtime.NumGoroutine() - goBefore
	if dir := os.Getenv("RR_BENCH_HEAPPROFILE"); dir != "" {
		writeHeapProfile(b, filepath.Join(dir, fmt.Sprintf("heap-%s-%d.pprof", srv.name, n)))
	}

	stdin.Close()
	_ = cmd.Wait()
	waitFor(b, "sockets to close", func() bool { return srv.live() == 0 })
	return connResult{
		heapPerAgent:   float64(int64(after.heap)-int64(before.heap)) / float64(n),
		stackPerAgent:  float64(int64(after.stack)-int64(before.stack)) / float64(n),
		rssPerAgent:    float64(int64(after.rss)-int64(before.rss)) / float64(n),
		cpuPerConnect:  cpu / time.Duration(n),
		wallPerConnect: wall / time.Duration(n),
		goroutines:     goroutines,
	}
}

// writeHeapProfile saves what is live with the swarm connected, for
// `go tool pprof -sample_index=inuse_space`.
func writeHeapProfile(b *testing.B, path string) {
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.Lookup("heap").WriteTo(f, 0); err != nil {
		b.Fatal(err)
	}
}

// BenchmarkConnections measures, at each count of idle agents, the hub's
// memory per connected agent (Go heap + stacks after GC, and RSS) and its
// CPU per connect (this process's user+system time from the first dial
// until every session went online), beside two bare gorilla servers (see
// bareServer), interleaved in one run. The agents are raw protocol clients
// in a child process (this test binary re-executed), so this process holds
// only the servers (and, for the hub, its embedded NATS):
//
//	RR_BENCH_ROUNDS=3 go test -run '^$' -bench Connections -benchtime 1x ./relay/hub
//
// RR_BENCH_AGENTS sets the counts (default "1000,5000"), RR_BENCH_ROUNDS the
// interleaved rounds whose medians it prints (default 1); RR_BENCH_ROOMS=0
// sends hellos without a room directory (older agents); RR_BENCH_HEAPPROFILE
// and RR_BENCH_CPUPROFILE name a directory to write a heap profile (with
// the agents connected) and a CPU profile (of the connects) per measurement.
func BenchmarkConnections(b *testing.B) {
	counts := benchCounts()
	raiseFileLimit()
	th := startHub(b, Config{})
	spec := enrollSwarm(b, th, slices.Max(counts))
	spec.NoRooms = os.Getenv("RR_BENCH_ROOMS") == "0"
	http.DefaultClient.CloseIdleConnections()
	servers := []*connServer{hubServer(th), bareServer(b, true, th.cfg.Heartbeat), bareServer(b, false, th.cfg.Heartbeat)}
	// Every device connects once before anything is measured, so the
	// figures are a reconnect's (the directory knows the device's room),
	// as after a restart, not a first connect's.
	connectSwarm(b, servers[0], spec, len(spec.Agents))

	rounds := 1
	if v, err := strconv.Atoi(os.Getenv("RR_BENCH_ROUNDS")); err == nil && v > 0 {
		rounds = v
	}
	results := map[string][]connResult{}
	for range rounds {
		for _, n := range counts {
			for _, srv := range servers {
				b.Run(fmt.Sprintf("agents=%d/%s", n, srv.name), func(b *testing.B) {
					var r connResult
					for range b.N {
						r = connectSwarm(b, srv, spec, n)
					}
					key := fmt.Sprint(n, srv.name)
					results[key] = append(results[key], r)
					b.ReportMetric(r.heapPerAgent, "heap+stack-B/agent")
					b.ReportMetric(r.rssPerAgent, "rss-B/agent")
					b.ReportMetric(float64(r.cpuPerConnect.Nanoseconds())/1e3, "cpu-µs/connect")
					b.ReportMetric(float64(r.wallPerConnect.Nanoseconds())/1e3, "wall-µs/connect")
				})
			}
		}
	}
	printConnTable(counts, servers, rounds, results)
}

// printConnTable prints the medians of the rounds, each server beside the
// hub.
func printConnTable(counts []int, servers []*connServer, rounds int, results map[string][]connResult) {
	med := func(rs []connResult, f func(connResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		slices.Sort(v)
		return v[len(v)/2]
	}
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nmedians of %d round(s), interleaved; memory is Go heap + stacks after GC over the count before connecting\n", rounds)
	fmt.Fprintf(&sb, "| agents | server | heap+stack /agent | of which stacks | RSS /agent | goroutines /agent | CPU /connect | hub ÷ this (mem · cpu) |\n|---|---|---|---|---|---|---|---|\n")
	for _, n := range counts {
		hub := results[fmt.Sprint(n, "hub")]
		for _, srv := range servers {
			rs := results[fmt.Sprint(n, srv.name)]
			if len(rs) == 0 || len(hub) == 0 {
				continue
			}
			heap := med(rs, func(r connResult) float64 { return r.heapPerAgent })
			cpu := med(rs, func(r connResult) float64 { return float64(r.cpuPerConnect) })
			ratio := "—"
			if srv.name != "hub" {
				ratio = fmt.Sprintf("%.2f× · %.2f×", med(hub, func(r connResult) float64 { return r.heapPerAgent })/heap,
					med(hub, func(r connResult) float64 { return float64(r.cpuPerConnect) })/cpu)
			}
			fmt.Fprintf(&sb, "| %d | %s | %.1f KiB | %.1f KiB | %.1f KiB | %.2f | %.0f µs | %s |\n", n, srv.name,
				heap/1024, med(rs, func(r connResult) float64 { return r.stackPerAgent })/1024,
				med(rs, func(r connResult) float64 { return r.rssPerAgent })/1024,
				med(rs, func(r connResult) float64 { return float64(r.goroutines) })/float64(n), cpu/1e3, ratio)
		}
	}
	fmt.Print(sb.String()) // stdout: a parent benchmark's b.Log is not shown
}

// enrollSwarm enrolls n devices (8 at a time) and returns them as a swarm
// spec whose hellos report one room each, as agents do.
func enrollSwarm(b *testing.B, th *testHub, n int) swarmSpec {
	spec := swarmSpec{Agents: make([][2]string, n)}
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				pc, err := th.cl.Pair(ctx, "p1", 0)
				if err != nil {
					errs <- err
					return
				}
				en, err := th.cl.Enroll(ctx, pc.Code, "bench", "linux", "")
				if err != nil {
					errs <- err
					return
				}
				spec.Agents[i] = [2]string{en.DeviceID, en.Token}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	return spec
}

// BenchmarkCommandRoundTrip measures HTTP → hub → NATS → websocket → fake
// agent → back, at 1 and 50 concurrent requests:
//
//	go test -run '^$' -bench CommandRoundTrip -benchtime 2000x ./relay/hub
func BenchmarkCommandRoundTrip(b *testing.B) {
	th := startHub(b, Config{})
	dev, tok := th.enroll("p1")
	a := dialAgent(b, th.wsURL(), tok, dev)
	a.serve(echoHandler)
	th.waitState(dev, hubapi.StateOnline)
	cl := hubclient.New(th.URL(), testAdmin)
	cl.HTTP = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 100}}
	defer cl.HTTP.CloseIdleConnections()

	for _, conc := range []int{1, 50} {
		b.Run(fmt.Sprintf("concurrency=%d", conc), func(b *testing.B) {
			lat := make([]time.Duration, b.N)
			next := make(chan int, b.N)
			for i := range b.N {
				next <- i
			}
			close(next)
			req := hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"r1"}`)}
			b.ResetTimer()
			var wg sync.WaitGroup
			for range conc {
				wg.Go(func() {
					for i := range next {
						t0 := time.Now()
						res, status, err := cl.Command(context.Background(), dev, req)
						lat[i] = time.Since(t0)
						if err != nil || status != 200 || !res.OK {
							b.Errorf("command: %v %d %+v", err, status, res)
							return
						}
					}
				})
			}
			wg.Wait()
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

// BenchmarkCrossNode compares a command entering the node that holds the
// device's socket with one entering another node (both on one external
// NATS server, the agent on node a), interleaved in one run:
//
//	go test -run '^$' -bench CrossNode -benchtime 2000x -count 3 ./relay/hub
func BenchmarkCrossNode(b *testing.B) {
	url := startExternalNATS(b)
	a := startHub(b, Config{NATSURL: url, NodeName: "a"})
	nb := startHub(b, Config{NATSURL: url, NodeName: "b"})
	dev, tok := a.enroll("p1")
	ag := dialAgent(b, a.wsURL(), tok, dev)
	ag.serve(echoHandler)
	a.waitState(dev, hubapi.StateOnline)
	req := hubapi.CommandRequest{ProjectID: "p1", Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"r1"}`)}
	for _, entry := range []struct {
		name string
		th   *testHub
	}{{"same-node", a}, {"cross-node", nb}} {
		b.Run(entry.name, func(b *testing.B) {
			cl := hubclient.New(entry.th.URL(), testAdmin)
			lat := make([]time.Duration, b.N)
			b.ResetTimer()
			for i := range b.N {
				t0 := time.Now()
				res, status, err := cl.Command(context.Background(), dev, req)
				lat[i] = time.Since(t0)
				if err != nil || status != 200 || !res.OK {
					b.Fatalf("command: %v %d %+v", err, status, res)
				}
			}
			b.StopTimer()
			slices.Sort(lat)
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

package hub

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gorilla/websocket"

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
	URL    string      `json:"url"`
	Agents [][2]string `json:"agents"` // device id, token
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
				b, _ := relay.Encode(helloFor(a[0]))
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
		runtime.GC()
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

// BenchmarkConnections measures hub memory per connected agent:
//
//	go test -run '^$' -bench Connections -benchtime 1x ./relay/hub
//
// RR_BENCH_AGENTS overrides the count (default 1000).
func BenchmarkConnections(b *testing.B) {
	n := 1000
	if v, err := strconv.Atoi(os.Getenv("RR_BENCH_AGENTS")); err == nil && v > 0 {
		n = v
	}
	raiseFileLimit()
	th := startHub(b, Config{})
	spec := swarmSpec{URL: th.wsURL()}
	ctx := context.Background()
	for range n {
		pc, err := th.cl.Pair(ctx, "p1", 0)
		if err != nil {
			b.Fatal(err)
		}
		en, err := th.cl.Enroll(ctx, pc.Code, "bench", "linux", "")
		if err != nil {
			b.Fatal(err)
		}
		spec.Agents = append(spec.Agents, [2]string{en.DeviceID, en.Token})
	}
	http.DefaultClient.CloseIdleConnections()

	for range b.N {
		before := sampleMem()
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
		connectTime := time.Since(start)
		waitFor(b, "all sessions", func() bool { return th.sessionCount() == n })
		after := sampleMem()
		goroutines := runtime.NumGoroutine()

		stdin.Close()
		_ = cmd.Wait()
		waitFor(b, "sessions to end", func() bool { return th.sessionCount() == 0 })

		b.ReportMetric(float64(int64(after.heap)-int64(before.heap))/float64(n), "heap-B/agent")
		if after.rss > 0 {
			b.ReportMetric(float64(int64(after.rss)-int64(before.rss))/float64(n), "rss-B/agent")
		}
		b.ReportMetric(float64(connectTime.Microseconds())/float64(n), "µs-connect/agent")
		b.Logf("%d agents: heap+stack %+d KiB (stacks %+d KiB), RSS %+d KiB, %d goroutines in the hub process, connected in %v",
			n, (int64(after.heap)-int64(before.heap))>>10, (int64(after.stack)-int64(before.stack))>>10,
			(int64(after.rss)-int64(before.rss))>>10, goroutines, connectTime)
	}
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

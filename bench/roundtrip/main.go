// Command roundtrip measures one command's round trip through four chains
// side by side, interleaved in one process, at 1 and 50 concurrent callers:
//
//   - full: HTTP → hub → NATS → websocket → the real agent (policy, schema,
//     dedupe store, audit log, SQLite rooms) → back;
//   - hub: the same hub and HTTP API, with a trivial raw-protocol agent that
//     answers every command at once;
//   - floor: an HTTP handler that sends a NATS request to a subscriber that
//     forwards it over a websocket to an echo client: the transport chain
//     with no hub logic at all;
//   - mcp: the same hub and real agent as full, through the hub's MCP front
//     (go-sdk client, stateless streamable HTTP, a client token, the room
//     found in the hub's directory);
//   - mcpthin: the same MCP tools/call as mcp, the go-sdk client's own
//     request replayed as a plain HTTP POST (a thin MCP client), so that
//     mcp ÷ mcpthin is the client library's cost and mcpthin ÷ full the
//     hub's MCP front's.
//
// It prints medians of -rounds rounds (p50 latency, throughput, errors) and
// the ratios the performance goals are stated in: full ÷ hub (the real
// agent's cost) and mcp ÷ full (the MCP path's cost), with mcpthin ÷ full
// beside it.
//
// -chains picks the chains to run; -cpuprofile, -blockprofile and
// -mutexprofile profile the measured rounds (not the start or the warm-up)
// of the whole process: the hub, the agent and the clients.
//
//	go run ./bench/roundtrip [-rounds 3] [-calls1 300] [-calls50 3000] [-chains full,hub,floor,mcp,mcpthin] [-json]
//	go run ./bench/roundtrip -chains full -cpuprofile cpu.out -blockprofile block.out -mutexprofile mutex.out
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

type chain interface {
	// call runs one read_room and reports whether it succeeded, and the
	// wire error code when it did not.
	call(ctx context.Context) (ok bool, code string)
	close()
}

type sample struct {
	p50, p99   time.Duration
	perSecond  float64
	errs, busy int
}

type options struct {
	rounds, calls1, calls50 int
	chains                  []string
	asJSON, verbose         bool
	cpuProfile              string
	blockProfile            string
	mutexProfile            string
}

var allChains = []string{"full", "hub", "floor", "mcp", "mcpthin"}

func main() {
	var o options
	flag.IntVar(&o.rounds, "rounds", 3, "interleaved rounds; the medians are reported")
	flag.IntVar(&o.calls1, "calls1", 300, "calls per round at 1 caller")
	flag.IntVar(&o.calls50, "calls50", 3000, "calls per round at 50 callers")
	chains := flag.String("chains", strings.Join(allChains, ","), "comma-separated chains to run: "+strings.Join(allChains, ", "))
	flag.BoolVar(&o.asJSON, "json", false, "print the medians as JSON")
	flag.BoolVar(&o.verbose, "v", false, "log the hub's and agent's warnings")
	flag.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured rounds to this file")
	flag.StringVar(&o.blockProfile, "blockprofile", "", "write a block profile of the measured rounds to this file")
	flag.StringVar(&o.mutexProfile, "mutexprofile", "", "write a mutex profile of the measured rounds to this file")
	flag.Parse()
	for _, c := range strings.Split(*chains, ",") {
		if c = strings.TrimSpace(c); c == "" {
			continue
		}
		if !slices.Contains(allChains, c) {
			fmt.Fprintf(os.Stderr, "roundtrip: unknown chain %q (known: %s)\n", c, strings.Join(allChains, ", "))
			os.Exit(2)
		}
		o.chains = append(o.chains, c)
	}
	if err := run(o); err != nil {
		fmt.Fprintln(os.Stderr, "roundtrip:", err)
		os.Exit(1)
	}
}

func run(o options) error {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	if o.verbose {
		log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	dir, err := os.MkdirTemp("", "roomrelay-roundtrip-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)

	fmt.Fprintf(os.Stderr, "starting the hub and the chains %s…\n", strings.Join(o.chains, ", "))
	env, err := startHub(ctx, dir, log)
	if err != nil {
		return err
	}
	defer env.close()
	type named struct {
		name string
		c    chain
	}
	var chains []named
	want := func(n string) bool { return slices.Contains(o.chains, n) }
	var full *agentChain
	if want("full") || want("mcp") || want("mcpthin") {
		if full, err = env.realAgent(ctx, dir, log); err != nil {
			return err
		}
		defer full.close()
	}
	for _, n := range o.chains {
		var c chain
		switch n {
		case "full":
			c = full
		case "hub":
			t, err := env.trivialAgent(ctx)
			if err != nil {
				return err
			}
			c = t
		case "floor":
			f, err := startFloor(ctx)
			if err != nil {
				return err
			}
			c = f
		case "mcp":
			var m *mcpChain
			// Labelled like measure's callers: its first session serves them too.
			pprof.Do(ctx, clientLabels, func(ctx context.Context) { m, err = env.mcpClient(ctx, 50) })
			if err != nil {
				return err
			}
			c = m
		case "mcpthin":
			var m *mcpThinChain
			pprof.Do(ctx, clientLabels, func(ctx context.Context) { m, err = env.mcpThinClient(ctx) })
			if err != nil {
				return err
			}
			c = m
		}
		if n != "full" {
			defer c.close()
		}
		chains = append(chains, named{n, c})
	}

	concs := []int{1, 50}
	got := map[string]map[int][]sample{}
	for _, ch := range chains {
		got[ch.name] = map[int][]sample{}
		// Warm up: connections, prepared statements, JIT-less caches.
		measure(ctx, ch.c, 50, 200)
	}
	stopProfiles, err := startProfiles(o)
	if err != nil {
		return err
	}
	for r := range o.rounds {
		for _, conc := range concs {
			n := o.calls1
			if conc > 1 {
				n = o.calls50
			}
			for _, ch := range chains {
				s := measure(ctx, ch.c, conc, n)
				got[ch.name][conc] = append(got[ch.name][conc], s)
				fmt.Fprintf(os.Stderr, "round %d/%d %-5s %2d callers: p50 %v, %.0f/s, %d errors (%d busy)\n",
					r+1, o.rounds, ch.name, conc, s.p50.Round(time.Microsecond), s.perSecond, s.errs, s.busy)
			}
		}
	}
	if err := stopProfiles(); err != nil {
		return err
	}
	med := map[string]map[int]sample{}
	for _, ch := range chains {
		med[ch.name] = map[int]sample{}
		for _, conc := range concs {
			med[ch.name][conc] = median(got[ch.name][conc])
		}
	}
	if o.asJSON {
		return printJSON(med)
	}
	printTable(os.Stdout, med, o.rounds)
	return nil
}

// clientLabels mark the goroutines of the bench's clients in profiles.
var clientLabels = pprof.Labels("side", "client")

// measure runs n calls from conc goroutines.
func measure(ctx context.Context, c chain, conc, n int) sample {
	lat := make([]time.Duration, n)
	var next atomic.Int64
	var errs, busy atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	// The callers' goroutines, and those their clients start (HTTP
	// transports, the MCP client's readers), carry the label side=client,
	// so a CPU profile tells the clients' cost from the hub's and the
	// agent's: go tool pprof -tagignore side=client.
	for range conc {
		wg.Go(func() {
			pprof.SetGoroutineLabels(pprof.WithLabels(ctx, clientLabels))
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				t := time.Now()
				ok, code := c.call(ctx)
				lat[i] = time.Since(t)
				if !ok {
					errs.Add(1)
					if code == string(relay.CodeBusy) {
						busy.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	el := time.Since(start)
	slices.Sort(lat)
	return sample{p50: lat[n/2], p99: lat[n*99/100], perSecond: float64(n-int(errs.Load())) / el.Seconds(), errs: int(errs.Load()), busy: int(busy.Load())}
}

// median takes each figure's median over the rounds on its own.
func median(ss []sample) sample {
	pick := func(f func(sample) float64) float64 {
		v := make([]float64, len(ss))
		for i, s := range ss {
			v[i] = f(s)
		}
		sort.Float64s(v)
		return v[len(v)/2]
	}
	return sample{
		p50:       time.Duration(pick(func(s sample) float64 { return float64(s.p50) })),
		p99:       time.Duration(pick(func(s sample) float64 { return float64(s.p99) })),
		perSecond: pick(func(s sample) float64 { return s.perSecond }),
		errs:      int(pick(func(s sample) float64 { return float64(s.errs) })),
		busy:      int(pick(func(s sample) float64 { return float64(s.busy) })),
	}
}

func printTable(w io.Writer, med map[string]map[int]sample, rounds int) {
	fmt.Fprintf(w, "read_room round trip, medians of %d interleaved rounds\n\n", rounds)
	fmt.Fprintf(w, "| chain | 1 caller p50 | 1 caller p99 | 50 callers p50 | 50 callers throughput | errors (busy) at 50 |\n")
	fmt.Fprintf(w, "|---|---|---|---|---|---|\n")
	for _, name := range allChains {
		m, ok := med[name]
		if !ok {
			continue
		}
		a, b := m[1], m[50]
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.0f /s | %d (%d) |\n", name, ms(a.p50), ms(a.p99), ms(b.p50), b.perSecond, b.errs, b.busy)
	}
	f, h, fl, mc, mt := med["full"], med["hub"], med["floor"], med["mcp"], med["mcpthin"]
	fmt.Fprintln(w)
	if f != nil && h != nil {
		fmt.Fprintf(w, "full / hub: p50 at 1 caller %.2f× (goal ≤ 1.25×), throughput at 50 callers %.3f of the hub's (goal ≥ 0.8)\n",
			ratio(f[1].p50, h[1].p50), f[50].perSecond/h[50].perSecond)
	}
	if h != nil && fl != nil {
		fmt.Fprintf(w, "hub / floor: p50 at 1 caller %.2f×, throughput at 50 callers %.3f of the floor's\n",
			ratio(h[1].p50, fl[1].p50), h[50].perSecond/fl[50].perSecond)
	}
	if mc != nil && f != nil {
		fmt.Fprintf(w, "mcp / full (HTTP API): p50 at 1 caller %.2f× (goal ≤ 1.1×), at 50 callers %.2f×, throughput at 50 callers %.3f of the HTTP API's\n",
			ratio(mc[1].p50, f[1].p50), ratio(mc[50].p50, f[50].p50), mc[50].perSecond/f[50].perSecond)
	}
	if mt != nil && f != nil {
		fmt.Fprintf(w, "mcpthin / full (HTTP API): p50 at 1 caller %.2f×, at 50 callers %.2f×, throughput at 50 callers %.3f of the HTTP API's (the hub's MCP front without the go-sdk client)\n",
			ratio(mt[1].p50, f[1].p50), ratio(mt[50].p50, f[50].p50), mt[50].perSecond/f[50].perSecond)
	}
	if mc != nil && mt != nil {
		fmt.Fprintf(w, "mcp / mcpthin: p50 at 1 caller %.2f× (the go-sdk client's cost)\n", ratio(mc[1].p50, mt[1].p50))
	}
}

func printJSON(med map[string]map[int]sample) error {
	type row struct {
		P50us     int64   `json:"p50_us"`
		P99us     int64   `json:"p99_us"`
		PerSecond float64 `json:"per_second"`
		Errors    int     `json:"errors"`
		Busy      int     `json:"busy"`
	}
	out := map[string]map[string]row{}
	for name, m := range med {
		out[name] = map[string]row{}
		for conc, s := range m {
			out[name][fmt.Sprint(conc)] = row{s.p50.Microseconds(), s.p99.Microseconds(), s.perSecond, s.errs, s.busy}
		}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	return enc.Encode(out)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.3f ms", float64(d.Microseconds())/1000) }

func ratio(a, b time.Duration) float64 { return float64(a) / float64(b) }

// pooled is an HTTP client that keeps enough idle connections for 50
// callers: http.DefaultClient keeps 2 per host and would measure connection
// churn instead of the chain.
func pooled() *http.Client {
	return &http.Client{Transport: &http.Transport{MaxIdleConns: 128, MaxIdleConnsPerHost: 128, IdleConnTimeout: time.Minute}}
}

// hubCall sends read_room through the hub's HTTP API.
func hubCall(ctx context.Context, e *hubEnv, dev string) (bool, string) {
	res, _, err := e.admin.Command(ctx, dev, hubapi.CommandRequest{ProjectID: project, Name: relay.CmdReadRoom, Args: json.RawMessage(`{"room_id":"room-1"}`)})
	if err != nil {
		return false, "transport"
	}
	if !res.OK {
		if res.Error != nil {
			return false, string(res.Error.Code)
		}
		return false, "unknown"
	}
	return true, ""
}

func jsonBody(s string) io.Reader { return strings.NewReader(s) }

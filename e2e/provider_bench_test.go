package e2e

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// BenchmarkProviderReadRoom compares read_room end to end, MCP → hub →
// agent → room data, for a room in the builtin store, one in a Go desktop
// app and one in a Node desktop app on the TypeScript client
// (e2e/tsbench/provider-app.mjs; left out without node and clients/ts's
// node_modules), each app over the provider websocket on a unix socket.
// The three are called in turn in every iteration, so they share the
// machine's load, and the ratios come from one run: ratio-node and ratio-go
// are each app's p50 over the builtin p50.
//
//	go test -run '^$' -bench ProviderReadRoom -benchtime 1000x ./e2e
//
// ROOMRELAY_BENCH_NODE_PROF=DIR runs the Node app with --cpu-prof into DIR
// (with -cpuprofile for this process: the hub and the agents);
// ROOMRELAY_BENCH_NODE_FLAGS adds node flags (e.g. --trace-gc).
func BenchmarkProviderReadRoom(b *testing.B) {
	h := startHub(b, hub.Config{DataDir: b.TempDir()})
	setup := func(app bool) *device {
		dv := enroll(b, h, "p")
		if err := os.MkdirAll(filepath.Dir(dv.policyPath()), 0o700); err != nil {
			b.Fatal(err)
		}
		pol := "version 1\n"
		if app {
			pol += "provider app\n"
		}
		pol += "project p\n  enabled yes\n  commands read_room\n  rate 1000000/min burst 100000\n"
		if err := os.WriteFile(dv.policyPath(), []byte(pol), 0o600); err != nil {
			b.Fatal(err)
		}
		dv.start(b, h.URL())
		waitState(b, h, dv.id, hubapi.StateOnline)
		return dv
	}
	builtin := setup(false)
	seedRoom(b, builtin, "p", "r-builtin")
	goApp := setup(true)
	connectDesktopApp(b, serveProvider(b, goApp), map[string]string{})
	rooms := []string{"r-builtin", "r-app"}
	if why := startNodeBenchApp(b, serveProvider(b, setup(true)), "r-node"); why != "" {
		b.Logf("the Node app is left out: %s", why)
	} else {
		rooms = append(rooms, "r-node")
	}
	tok := clientToken(b, h, "p", hubapi.ScopeRead)
	cs := mcpSession(b, h, tok.Token, nil)
	eventually(b, "every room in the directory", func() bool { return len(listRooms(b, cs)) == len(rooms) })
	readRoom := func(room string) time.Duration {
		t := time.Now()
		r, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: relay.CmdReadRoom, Arguments: map[string]any{"room_id": room}})
		d := time.Since(t)
		if err != nil || r.IsError {
			b.Fatalf("read_room %s: %v %v", room, err, r)
		}
		return d
	}
	for _, room := range rooms { // warm every path once
		readRoom(room)
	}
	lat := make(map[string][]time.Duration, len(rooms))
	for b.Loop() {
		for _, room := range rooms {
			lat[room] = append(lat[room], readRoom(room))
		}
	}
	p50 := map[string]float64{}
	for _, room := range rooms {
		l := lat[room]
		slices.Sort(l)
		name := strings.TrimPrefix(room, "r-")
		p50[name] = float64(l[len(l)/2].Microseconds())
		b.ReportMetric(p50[name], name+"-p50-µs")
		b.ReportMetric(float64(l[len(l)*99/100].Microseconds()), name+"-p99-µs")
	}
	b.ReportMetric(p50["app"]/p50["builtin"], "ratio-go")
	if _, ok := p50["node"]; ok {
		b.ReportMetric(p50["node"]/p50["builtin"], "ratio-node")
	}
}

// startNodeBenchApp runs e2e/tsbench/provider-app.mjs as the provider on
// sock, owning room; it returns why not when node or clients/ts is missing.
func startNodeBenchApp(b *testing.B, sock, room string) string {
	dir, err := filepath.Abs(tsclientDirName)
	if err != nil {
		b.Fatal(err)
	}
	if missing := nodeMissing(dir, "typescript", ""); missing != "" {
		return missing
	}
	compileTSClient(b, dir)
	args := strings.Fields(os.Getenv("ROOMRELAY_BENCH_NODE_FLAGS"))
	if prof := os.Getenv("ROOMRELAY_BENCH_NODE_PROF"); prof != "" {
		args = append(args, "--cpu-prof", "--cpu-prof-dir", prof)
	}
	args = append(args, filepath.Join("tsbench", "provider-app.mjs"), sock, room, "p")
	c := exec.Command("node", args...)
	c.Stderr = os.Stderr
	stdin, err := c.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	out, err := c.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := c.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close() // the app closes and exits (writing its profile)
		done := make(chan struct{})
		go func() { _ = c.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = c.Process.Kill()
			<-done
		}
	})
	ready := make(chan error, 1)
	go func() {
		// Read to the end: a Node flag's output (--trace-gc) must not fill
		// the pipe and stall the app.
		sc := bufio.NewScanner(out)
		registered := false
		for sc.Scan() {
			if sc.Text() == "ready" && !registered {
				registered = true
				ready <- nil
				continue
			}
			fmt.Fprintln(os.Stderr, "node app:", sc.Text())
		}
		if !registered {
			ready <- fmt.Errorf("the Node app exited before it registered")
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			b.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		b.Fatal("the Node app did not register within 30 s")
	}
	return ""
}

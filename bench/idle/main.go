// Command idle measures the agent's idle footprint as a real process (Linux):
// it builds roomrelay, starts a hub (`roomrelay hub`) on loopback, pairs and
// enrolls a device with the file credential store, starts `roomrelay run`,
// and samples the agent from /proc over a window while it is connected and
// again with one event stream open on its local API (a desktop app watching
// it), connected again with the stream closed (a bracket around the stream's
// phase), and after the hub was killed (hub unreachable, agent backing off):
//
//	go run ./bench/idle                      # 2 minutes per phase and build
//	go run ./bench/idle -window 20s -json    # quicker
//	go run ./bench/idle -build agent         # only the device build
//
// By default it measures both builds in one run, one after the other against
// the same hub binary: "agent" (cmd/roomrelay-agent, what the packages ship) and
// "full" (hub and demo linked in, the baseline).
//
// Figures per phase: RSS (max sampled, and at the end; anonymous and file
// pages at the end), CPU seconds per hour (the threads' run time from
// /proc/PID/task/*/schedstat, in ns; utime+stime ticks where schedstat is
// missing), and wakeups per minute
// (voluntary+involuntary context switches summed over the process's threads
// from /proc/PID/task/*/status). Sandbox workers are not counted: an idle
// agent has none (they exit after 30 s idle).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/bench/internal/benchutil"
)

// clkTck is USER_HZ, 100 on every Linux the agent targets.
const clkTck = 100

type phase struct {
	Build          string  `json:"build"`
	Name           string  `json:"name"`
	Window         string  `json:"window"`
	AgentState     string  `json:"agent_state"`
	RSSMaxMiB      float64 `json:"rss_max_mib"`
	RSSEndMiB      float64 `json:"rss_end_mib"`
	RSSAnonMiB     float64 `json:"rss_anon_mib"` // at the end: heap, stacks, runtime
	RSSFileMiB     float64 `json:"rss_file_mib"` // at the end: clean pages of the binary and libraries
	CPUSecPerHour  float64 `json:"cpu_seconds_per_hour"`
	CPUPercent     float64 `json:"cpu_percent"`
	WakeupsPerMin  float64 `json:"wakeups_per_minute"`
	Threads        int     `json:"threads"`
	VoluntaryCS    int64   `json:"voluntary_ctxt_switches"`
	NonvoluntaryCS int64   `json:"nonvoluntary_ctxt_switches"`
}

func main() {
	window := flag.Duration("window", 2*time.Minute, "measurement window per phase")
	settle := flag.Duration("settle", 10*time.Second, "wait after each transition before measuring")
	asJSON := flag.Bool("json", false, "print JSON")
	keep := flag.Bool("keep", false, "keep the work directory (logs, homes)")
	build := flag.String("build", "both", "agent build to measure: agent (cmd/roomrelay-agent), full, or both")
	withLogind := flag.Bool("logind", true, "give the agent a system bus with a (fake, never signalling) logind, as on a Linux laptop; false: no sleep notifications, the wall-clock wake detector ticks")
	hubBin := flag.String("hub-bin", "", "run the hub from this prebuilt full binary instead of building cmd/roomrelay (only with -build agent)")
	agentBin := flag.String("agent-bin", "", "measure this prebuilt device binary as the agent build (e.g. one built from an earlier commit) instead of building cmd/roomrelay-agent")
	flag.Parse()
	var builds []string
	switch *build {
	case "agent", "full":
		builds = []string{*build}
	case "both":
		builds = []string{"agent", "full"}
	default:
		fmt.Fprintf(os.Stderr, "idle: -build %q: want agent, full or both\n", *build)
		os.Exit(2)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	phases, err := run(ctx, log, builds, *hubBin, *agentBin, *withLogind, *window, *settle, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "idle:", err)
		os.Exit(1)
	}
	if *asJSON {
		json.NewEncoder(os.Stdout).Encode(phases)
		return
	}
	fmt.Printf("%-6s %-15s %-8s %8s %8s %8s %8s %10s %7s %10s %9s %7s\n", "build", "phase", "state", "RSSmax", "RSSend", "anon", "file", "CPU s/h", "CPU%", "wakeups/m", "vol/invol", "threads")
	for _, p := range phases {
		fmt.Printf("%-6s %-15s %-8s %6.1fMB %6.1fMB %6.1fMB %6.1fMB %10.2f %6.3f%% %10.1f %4d/%-4d %7d\n", p.Build, p.Name, p.AgentState,
			p.RSSMaxMiB, p.RSSEndMiB, p.RSSAnonMiB, p.RSSFileMiB, p.CPUSecPerHour, p.CPUPercent, p.WakeupsPerMin, p.VoluntaryCS, p.NonvoluntaryCS, p.Threads)
	}
	for i := 1; i < len(phases); i++ {
		if a, f := phases[i-1], phases[i]; f.Build == "floor" && f.WakeupsPerMin > 0 {
			fmt.Printf("%s %s: wakeups %.1f/min, floor %.1f/min (same window): %.2f× the floor\n",
				a.Build, a.Name, a.WakeupsPerMin, f.WakeupsPerMin, a.WakeupsPerMin/f.WakeupsPerMin)
		}
	}
	fmt.Printf("window %s per phase; RSS in MiB\n", *window)
}

func run(ctx context.Context, log *slog.Logger, builds []string, hubBin, agentBin string, withLogind bool, window, settle time.Duration, keep bool) ([]phase, error) {
	dir, err := os.MkdirTemp("", "roomrelay-idle-")
	if err != nil {
		return nil, err
	}
	if keep {
		log.Info("work directory kept", "dir", dir)
	} else {
		defer os.RemoveAll(dir)
	}
	// Built as the packages build them (packaging/cmd/mkpkg): static,
	// trimmed, stripped.
	goBuild := func(out, pkg string, flags ...string) error {
		args := append([]string{"build", "-trimpath", "-ldflags", "-s -w"}, flags...)
		cmd := exec.CommandContext(ctx, "go", append(args, "-o", out, pkg)...)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("go build %s: %w", pkg, err)
		}
		return nil
	}
	bins := map[string]string{"full": filepath.Join(dir, "roomrelay-full"), "agent": filepath.Join(dir, "roomrelay-agent")}
	log.Info("building roomrelay", "builds", "full, agent")
	// A prebuilt binary is copied in: building the full binary takes
	// minutes on a loaded machine.
	copyBin := func(from, to string) error {
		b, err := os.ReadFile(from)
		if err == nil {
			err = os.WriteFile(to, b, 0o755)
		}
		return err
	}
	if hubBin != "" && len(builds) == 1 && builds[0] == "agent" {
		if err := copyBin(hubBin, bins["full"]); err != nil {
			return nil, fmt.Errorf("-hub-bin: %w", err)
		}
	} else if err := goBuild(bins["full"], "./cmd/roomrelay"); err != nil {
		return nil, err
	}
	if agentBin != "" {
		// Copied next to this tree's sandbox worker, where it looks for it.
		if err := copyBin(agentBin, bins["agent"]); err != nil {
			return nil, fmt.Errorf("-agent-bin: %w", err)
		}
	} else if err := goBuild(bins["agent"], "./cmd/roomrelay-agent"); err != nil {
		return nil, err
	}
	floorBin := filepath.Join(dir, "floor")
	if err := goBuild(floorBin, "./bench/idle/floor"); err != nil {
		return nil, err
	}
	// The device build's sandbox worker, next to roomrelay-agent where the
	// agent looks for it (an idle agent starts no worker, but without one it
	// would run without its sandbox pool).
	sandbox := filepath.Join(dir, "roomrelay-sandbox")
	if prebuilt := filepath.Join(filepath.Dir(agentBin), "roomrelay-sandbox"); agentBin != "" && copyBin(prebuilt, sandbox) == nil {
		log.Info("sandbox worker copied from beside -agent-bin")
	} else if err := goBuild(sandbox, "./cmd/roomrelay-sandbox"); err != nil {
		return nil, err
	}
	var all []phase
	for _, b := range builds {
		ps, err := runBuild(ctx, log, filepath.Join(dir, b), bins["full"], bins[b], floorBin, withLogind, window, settle)
		if err != nil {
			return nil, fmt.Errorf("%s build: %w", b, err)
		}
		for i := range ps {
			if ps[i].Build == "" {
				ps[i].Build = b
			}
		}
		all = append(all, ps...)
	}
	return all, nil
}

// runBuild measures one agent binary against a hub run from hubBin, with its
// own hub and agent homes under dir.
// The floor (a bare websocket holder, floorBin) runs beside the agent while
// it is connected and is measured in the same windows.
func runBuild(ctx context.Context, log *slog.Logger, dir, hubBin, bin, floorBin string, withLogind bool, window, settle time.Duration) ([]phase, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	addr, err := benchutil.FreeAddr()
	if err != nil {
		return nil, err
	}
	hubURL := "http://" + addr
	hubHome, agentHome := filepath.Join(dir, "hub"), filepath.Join(dir, "agent")

	hub, err := start(ctx, hubBin, filepath.Join(dir, "hub.log"), "hub", "--home", hubHome, "--listen", addr)
	if err != nil {
		return nil, err
	}
	defer hub.stop()
	if err := benchutil.WaitFor(ctx, 30*time.Second, func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	}); err != nil {
		return nil, fmt.Errorf("hub did not come up (see hub.log with -keep): %w", err)
	}
	out, err := exec.CommandContext(ctx, bin, "hub", "pair", "--home", hubHome, "--hub", hubURL, "--project", "bench", "--json").Output()
	if err != nil {
		return nil, fmt.Errorf("hub pair: %w", err)
	}
	var pc struct {
		Code string `json:"code"`
	}
	if err := json.Unmarshal(out, &pc); err != nil || pc.Code == "" {
		return nil, fmt.Errorf("hub pair printed %q: %v", out, err)
	}
	enroll := exec.CommandContext(ctx, bin, "enroll", "--home", agentHome, "--hub", hubURL, "--code", pc.Code, "--credential-store", "file")
	if out, err := enroll.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("enroll: %w: %s", err, out)
	}
	var env []string
	var logind *fakeLogind
	if withLogind {
		if logind, err = startLogind(ctx, dir); err != nil {
			return nil, err
		}
		defer logind.stop()
		env = append(env, "DBUS_SYSTEM_BUS_ADDRESS="+logind.Addr)
	}
	agent, err := startEnv(ctx, env, bin, filepath.Join(dir, "agent.log"), "run", "--home", agentHome, "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	defer agent.stop()
	floor, stopFloor, err := startFloor(ctx, dir, floorBin, hubHeartbeat)
	if err != nil {
		return nil, err
	}
	defer stopFloor()
	pids := []int{agent.cmd.Process.Pid, floor.cmd.Process.Pid}
	state := func() string {
		out, _ := exec.CommandContext(ctx, bin, "status", "--home", agentHome, "--json").Output()
		var r struct {
			State string `json:"state"`
		}
		json.Unmarshal(out, &r)
		return r.State
	}
	if err := benchutil.WaitFor(ctx, 60*time.Second, func() bool { return state() == "online" }); err != nil {
		return nil, fmt.Errorf("agent did not come online (state %q): %w", state(), err)
	}
	log.Info("agent online; settling", "settle", settle)
	if err := benchutil.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	if logind != nil && logind.locks() == 0 {
		return nil, errors.New("-logind: the agent took no inhibitor lock from the bench's logind: it does not hear sleep notifications")
	}
	var phases []phase
	log.Info("measuring connected", "window", window)
	ps, err := measure(ctx, pids, window)
	if err != nil {
		return nil, err
	}
	phases = append(phases, named(ps, "connected", state())...)

	// The same agent with one desktop app's event stream open on its local
	// API (the socket the discovery file names): what the stream costs.
	paths, err := device.ResolvePaths(agentHome, os.Getenv)
	if err != nil {
		return nil, err
	}
	lc, _, err := localapi.Discover(ctx, paths.Config)
	if err != nil {
		return nil, fmt.Errorf("local api: %w", err)
	}
	sctx, stopStream := context.WithCancel(ctx)
	defer stopStream()
	resp, err := lc.Stream(sctx, "events?initial=1")
	if err != nil {
		return nil, fmt.Errorf("local api event stream: %w", err)
	}
	defer resp.Body.Close()
	go io.Copy(io.Discard, resp.Body) // read every line, as an app does
	if err := benchutil.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	log.Info("measuring connected with one event stream", "window", window)
	ps, err = measure(ctx, pids, window)
	if err != nil {
		return nil, err
	}
	phases = append(phases, named(ps, "events", state())...)
	stopStream()

	// The same agent, still connected, with the stream closed again: the
	// stream's cost is events minus the phases on either side of it, so
	// drift over the run (a busy machine, runtime housekeeping) shows as a
	// difference between connected and connected-again instead of being
	// read as the stream's.
	if err := benchutil.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	log.Info("measuring connected again, the stream closed", "window", window)
	ps, err = measure(ctx, pids, window)
	if err != nil {
		return nil, err
	}
	phases = append(phases, named(ps, "connected-again", state())...)
	stopFloor()

	log.Info("killing the hub")
	hub.kill()
	if err := benchutil.WaitFor(ctx, 90*time.Second, func() bool { s := state(); return s != "online" && s != "" }); err != nil {
		return nil, fmt.Errorf("agent still %q after the hub died: %w", state(), err)
	}
	if err := benchutil.Sleep(ctx, settle); err != nil {
		return nil, err
	}
	log.Info("measuring hub unreachable", "window", window)
	ps, err = measure(ctx, pids[:1], window)
	if err != nil {
		return nil, err
	}
	phases = append(phases, named(ps, "hub-down", state())...)
	return phases, nil
}

// hubHeartbeat is `roomrelay hub`'s default heartbeat (relay/hub
// DefaultHeartbeat), which the floor uses too.
const hubHeartbeat = 25 * time.Second

// named labels the phases measure returned: the agent's first, then the
// floor's (build "floor", its state "connected").
func named(ps []phase, name, state string) []phase {
	for i := range ps {
		ps[i].Name, ps[i].AgentState = name, state
		if i > 0 {
			ps[i].Build, ps[i].AgentState = "floor", "online"
		}
	}
	return ps
}

// proc is a child process and a channel closed once it has been waited for.
type proc struct {
	cmd  *exec.Cmd
	done chan struct{}
}

func start(ctx context.Context, bin, logPath string, args ...string) (*proc, error) {
	return startEnv(ctx, nil, bin, logPath, args...)
}

// startEnv is start with env added to the bench's environment.
func startEnv(ctx context.Context, env []string, bin, logPath string, args ...string) (*proc, error) {
	lf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start roomrelay %s: %w", args[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{})}
	go func() { cmd.Wait(); lf.Close(); close(p.done) }()
	return p, nil
}

// stop ends the child: SIGTERM, then SIGKILL after 10 s.
func (p *proc) stop() {
	p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) kill() {
	p.cmd.Process.Kill()
	<-p.done
}

type sample struct {
	ticks    int64
	vol, inv int64
	threads  int
	rssKiB   int64
	anonKiB  int64
	fileKiB  int64
	runNS    int64 // sum of the threads' schedstat run time
}

func read(pid int) (sample, error) {
	var s sample
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	ut, _ := strconv.ParseInt(f[11], 10, 64) // field 14
	st, _ := strconv.ParseInt(f[12], 10, 64) // field 15
	s.ticks = ut + st
	status := fmt.Sprintf("/proc/%d/status", pid)
	s.rssKiB = benchutil.StatusField(status, "VmRSS")
	s.anonKiB, s.fileKiB = benchutil.StatusField(status, "RssAnon"), benchutil.StatusField(status, "RssFile")
	tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
	if err != nil {
		return s, err
	}
	for _, t := range tasks {
		// schedstat's first field is the thread's time on a CPU in ns:
		// exact, where utime+stime are 10 ms ticks (a few ticks per window
		// for an idle process).
		if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/schedstat", pid, t.Name())); err == nil {
			if f := strings.Fields(string(b)); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				s.runNS += n
			}
		}
		p := fmt.Sprintf("/proc/%d/task/%s/status", pid, t.Name())
		s.vol += benchutil.StatusField(p, "voluntary_ctxt_switches")
		s.inv += benchutil.StatusField(p, "nonvoluntary_ctxt_switches")
		s.threads++
	}
	return s, nil
}

// measure samples pids over the same window and returns one phase each,
// in order: the agent and the floor side by side, so their ratio is from one
// window on one machine load.
func measure(ctx context.Context, pids []int, window time.Duration) ([]phase, error) {
	first := make([]sample, len(pids))
	maxRSS := make([]int64, len(pids))
	for i, pid := range pids {
		s, err := read(pid)
		if err != nil {
			return nil, err
		}
		first[i], maxRSS[i] = s, s.rssKiB
	}
	t0 := time.Now()
	tick := time.NewTicker(5 * time.Second)
	defer tick.Stop()
	end := time.After(window)
loop:
	for {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-end:
			break loop
		case <-tick.C:
			for i, pid := range pids {
				if s, err := read(pid); err == nil && s.rssKiB > maxRSS[i] {
					maxRSS[i] = s.rssKiB
				}
			}
		}
	}
	el := time.Since(t0)
	out := make([]phase, len(pids))
	for i, pid := range pids {
		b, err := read(pid)
		if err != nil {
			return nil, fmt.Errorf("process %d gone during the window: %w", pid, err)
		}
		out[i] = diff(first[i], b, maxRSS[i], el)
	}
	return out, nil
}

// diff is the phase between samples a and b taken el apart.
func diff(a, b sample, maxRSS int64, el time.Duration) phase {
	cpu := float64(b.ticks-a.ticks) / clkTck
	if b.runNS > 0 {
		cpu = float64(max(b.runNS-a.runNS, 0)) / 1e9
	}
	// Threads that exited during the window take their switches with them;
	// never report a negative count.
	vol, inv := max(b.vol-a.vol, 0), max(b.inv-a.inv, 0)
	return phase{
		Window:         el.Round(time.Second).String(),
		RSSMaxMiB:      float64(max(maxRSS, b.rssKiB)) / 1024,
		RSSEndMiB:      float64(b.rssKiB) / 1024,
		RSSAnonMiB:     float64(b.anonKiB) / 1024,
		RSSFileMiB:     float64(b.fileKiB) / 1024,
		CPUSecPerHour:  cpu / el.Hours(),
		CPUPercent:     100 * cpu / el.Seconds(),
		WakeupsPerMin:  float64(vol+inv) / el.Minutes(),
		Threads:        b.threads,
		VoluntaryCS:    vol,
		NonvoluntaryCS: inv,
	}
}

// Command soak runs a bounded soak of a real hub and many real agents, all
// as separate `roomrelay` processes on loopback: commands at a steady rate
// through the hub's HTTP API, a random agent killed with SIGKILL (and
// restarted) every few seconds, the hub restarted every minute. At the end
// it checks that no proposal was created twice (every write retried after a
// lost answer carries its content-derived key), that no call was lost
// without an error, that every agent's audit chain verifies, and compares
// the hub's RSS with its baseline. Not part of the test suite: it takes
// minutes.
//
//	go run ./bench/soak -agents 200 -duration 10m
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/bench/internal/benchutil"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const project = "soak"

func main() {
	agents := flag.Int("agents", 200, "agents (separate processes)")
	duration := flag.Duration("duration", 10*time.Minute, "how long the load runs (at most 30m)")
	rate := flag.Int("rate", 20, "commands per second through the hub, in all")
	killEvery := flag.Duration("kill-every", 5*time.Second, "SIGKILL a random agent this often (it restarts 1–3 s later)")
	restartEvery := flag.Duration("restart-every", time.Minute, "restart the hub this often (SIGTERM, then start it again; 0: never, to see one hub process through the whole soak)")
	keep := flag.Bool("keep", false, "keep the work directory")
	flag.Parse()
	if *duration > 30*time.Minute || *agents < 1 || *agents > 500 || *rate < 1 || *rate > 500 {
		fmt.Fprintln(os.Stderr, "soak: want 1–500 agents, 1–500 commands/s and at most 30m")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	if err := run(ctx, log, *agents, *duration, *rate, *killEvery, *restartEvery, *keep); err != nil {
		fmt.Fprintln(os.Stderr, "soak:", err)
		os.Exit(1)
	}
}

type soak struct {
	log     *slog.Logger
	dir     string
	bin     string
	hubHome string
	addr    string
	url     string
	admin   *hubclient.Client

	mu     sync.Mutex
	hub    *proc
	agents []*agentProc

	// outcomes
	calls, ok, refused, transport, lost atomic.Int64
	proposals                           atomic.Int64 // distinct proposals answered
	retries                             atomic.Int64
	kills, hubRestarts                  atomic.Int64
}

type agentProc struct {
	i    int
	home string
	id   string
	room string
	mu   sync.Mutex
	p    *proc
}

func run(ctx context.Context, log *slog.Logger, n int, duration time.Duration, rate int, killEvery, restartEvery time.Duration, keep bool) error {
	if runtime.GOOS != "linux" {
		return errors.New("linux only (it reads /proc)")
	}
	dir, err := os.MkdirTemp("", "roomrelay-soak-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(dir)
	} else {
		log.Info("work directory kept", "dir", dir)
	}
	s := &soak{log: log, dir: dir, bin: filepath.Join(dir, "roomrelay"), hubHome: filepath.Join(dir, "hub")}
	log.Info("building roomrelay")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", s.bin, "./cmd/roomrelay").CombinedOutput(); err != nil {
		return fmt.Errorf("go build: %w: %s", err, out)
	}
	if s.addr, err = benchutil.FreeAddr(); err != nil {
		return err
	}
	s.url = "http://" + s.addr
	if err := s.startHub(ctx); err != nil {
		return err
	}
	defer func() { s.hubProc().stop() }()
	tok, err := os.ReadFile(filepath.Join(s.hubHome, "data", "hub", "admin-token"))
	if err != nil {
		return fmt.Errorf("admin token: %w", err)
	}
	s.admin = hubclient.New(s.url, strings.TrimSpace(string(tok)))

	log.Info("enrolling agents", "agents", n)
	if err := s.setupAgents(ctx, n); err != nil {
		return err
	}
	defer s.stopAgents()
	if err := benchutil.WaitFor(ctx, 3*time.Minute, func() bool { return s.online(ctx) == n }); err != nil {
		return fmt.Errorf("not all %d agents came online (%d did)", n, s.online(ctx))
	}
	time.Sleep(5 * time.Second)
	baseRSS := benchutil.RSSKiB(s.hubProc().cmd.Process.Pid)
	log.Info("all agents online; load starts", "hub_rss_kib", baseRSS, "duration", duration)
	snaps := []memSnap{s.memory(ctx, "baseline (agents online, no load)")}

	loadCtx, stopLoad := context.WithTimeout(ctx, duration)
	var wg sync.WaitGroup
	wg.Go(func() { s.load(loadCtx, rate) })
	wg.Go(func() { s.killer(loadCtx, killEvery) })
	var restartRSS []int64
	wg.Go(func() { // a memory snapshot every minute of load
		t := time.NewTicker(time.Minute)
		defer t.Stop()
		for i := 1; ; i++ {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			m := s.memory(ctx, fmt.Sprintf("load, minute %d", i))
			s.mu.Lock()
			snaps = append(snaps, m)
			s.mu.Unlock()
		}
	})
	wg.Go(func() {
		if restartEvery <= 0 {
			return
		}
		t := time.NewTicker(restartEvery)
		defer t.Stop()
		for {
			select {
			case <-loadCtx.Done():
				return
			case <-t.C:
			}
			restartRSS = append(restartRSS, benchutil.RSSKiB(s.hubProc().cmd.Process.Pid))
			s.hubProc().stop()
			if err := s.startHub(ctx); err != nil {
				log.Error("hub restart", "err", err)
				return
			}
			s.hubRestarts.Add(1)
		}
	})
	wg.Wait()
	stopLoad()
	log.Info("load done; letting the agents settle")
	s.restartDead(ctx)
	_ = benchutil.WaitFor(ctx, 2*time.Minute, func() bool { return s.online(ctx) == n })
	time.Sleep(10 * time.Second)
	endRSS := benchutil.RSSKiB(s.hubProc().cmd.Process.Pid)
	snaps = append(snaps, s.memory(ctx, "end (load over, agents settled)"))
	online := s.online(ctx)
	s.stopAgents()

	dups, badChains := s.check(ctx)
	fmt.Printf("\nsoak: %d agents, %s, %d commands/s, a SIGKILL every %s, a hub restart every %s\n", n, duration, rate, killEvery, restartEvery)
	fmt.Printf("| calls | ok | refused (error code) | transport errors | lost without an error | proposals | retries | agent kills | hub restarts |\n|---|---|---|---|---|---|---|---|---|\n")
	fmt.Printf("| %d | %d | %d | %d | %d | %d | %d | %d | %d |\n", s.calls.Load(), s.ok.Load(), s.refused.Load(), s.transport.Load(),
		s.lost.Load(), s.proposals.Load(), s.retries.Load(), s.kills.Load(), s.hubRestarts.Load())
	fmt.Printf("proposals created twice: %d; audit chains that fail to verify: %d of %d; agents online at the end: %d\n", dups, badChains, n, online)
	fmt.Printf("hub RSS: baseline %d KiB (all agents online, before load), before each restart %v KiB, at the end %d KiB (%+.1f%%)\n",
		baseRSS, restartRSS, endRSS, 100*float64(endRSS-baseRSS)/float64(max(baseRSS, 1)))
	printMemory(snaps)
	if dups > 0 || badChains > 0 || s.lost.Load() > 0 {
		return errors.New("the soak found problems (see above)")
	}
	return nil
}

func (s *soak) hubProc() *proc {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.hub
}

func (s *soak) startHub(ctx context.Context) error {
	p, err := start(ctx, s.bin, filepath.Join(s.dir, "hub.log"), "hub", "--home", s.hubHome, "--listen", s.addr, "--heartbeat", "5s", "--log-level", "warn")
	if err != nil {
		return err
	}
	s.mu.Lock()
	s.hub = p
	s.mu.Unlock()
	return benchutil.WaitFor(ctx, time.Minute, func() bool {
		c, err := net.DialTimeout("tcp", s.addr, time.Second)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
}

func (s *soak) setupAgents(ctx context.Context, n int) error {
	sem := make(chan struct{}, 4)
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for i := range n {
		a := &agentProc{i: i, home: filepath.Join(s.dir, "agents", strconv.Itoa(i)), room: "room-" + strconv.Itoa(i)}
		s.agents = append(s.agents, a)
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			errs <- s.setupAgent(ctx, a)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

func (s *soak) setupAgent(ctx context.Context, a *agentProc) error {
	pc, err := s.admin.Pair(ctx, project, 0)
	if err != nil {
		return fmt.Errorf("pair: %w", err)
	}
	out, err := exec.CommandContext(ctx, s.bin, "enroll", "--home", a.home, "--hub", s.url, "--code", pc.Code, "--credential-store", "file", "--json").Output()
	if err != nil {
		return fmt.Errorf("enroll agent %d: %w", a.i, err)
	}
	var en struct {
		DeviceID string `json:"device_id"`
	}
	if err := json.Unmarshal(out, &en); err != nil || en.DeviceID == "" {
		return fmt.Errorf("enroll agent %d printed %q", a.i, out)
	}
	a.id = en.DeviceID
	for _, args := range [][]string{
		{"rooms", "create", "--home", a.home, "--project", project, "--name", "Soak " + strconv.Itoa(a.i), "--id", a.room},
		{"enable", project, "--home", a.home, "--allow", "read_room,propose_room_snippet_app"},
	} {
		if out, err := exec.CommandContext(ctx, s.bin, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("agent %d: %s: %w: %s", a.i, args[0], err, out)
		}
	}
	// The soak leaves every proposal pending (nobody reviews): raise the
	// pending bounds to their ceiling, or past the default ten per room most
	// calls would be refused and the soak would measure refusals.
	paths, err := device.ResolvePaths(a.home, os.Getenv)
	if err != nil {
		return err
	}
	pol, err := os.OpenFile(filepath.Join(paths.Config, daemon.PolicyFile), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return fmt.Errorf("agent %d: policy: %w", a.i, err)
	}
	_, err = fmt.Fprintf(pol, "  max %s %d\n  max %s %d\n", allowlist.BoundPendingRoom, allowlist.MaxPending, allowlist.BoundPendingProject, allowlist.MaxPending)
	if cerr := pol.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("agent %d: policy: %w", a.i, err)
	}
	return s.startAgent(ctx, a)
}

func (s *soak) startAgent(ctx context.Context, a *agentProc) error {
	p, err := start(ctx, s.bin, filepath.Join(a.home, "agent.log"), "run", "--home", a.home, "--log-level", "warn")
	if err != nil {
		return err
	}
	a.mu.Lock()
	a.p = p
	a.mu.Unlock()
	return nil
}

func (s *soak) online(ctx context.Context) int {
	devs, err := s.admin.Devices(ctx)
	if err != nil {
		return 0
	}
	n := 0
	for _, d := range devs {
		if d.Presence.State == hubapi.StateOnline {
			n++
		}
	}
	return n
}

// load sends commands at rate per second: half read_room, half a proposal
// with a unique name, retried with its content-derived key until answered.
func (s *soak) load(ctx context.Context, rate int) {
	t := time.NewTicker(time.Second / time.Duration(rate))
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	seq := 0
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		seq++
		a := s.agents[rand.IntN(len(s.agents))]
		n := seq
		wg.Go(func() { s.command(a, n) })
	}
}

func (s *soak) command(a *agentProc, n int) {
	ctx := context.Background()
	hc := *s.admin
	name, args := relay.CmdReadRoom, map[string]any{"room_id": a.room}
	propose := n%2 == 0
	if propose {
		files := map[string]string{"src/App.tsx": fmt.Sprintf("export default function App() { return <p>%d</p> }\n", n)}
		pname := "soak-" + strconv.Itoa(n)
		name, args = relay.CmdProposeRoomSnippetApp, map[string]any{"room_id": a.room, "name": pname, "files": files,
			"idempotency_key": relay.SnippetKey(a.room, pname, files)}
	}
	raw, _ := json.Marshal(args)
	for attempt := 0; attempt < 20; attempt++ {
		if attempt > 0 {
			s.retries.Add(1)
			time.Sleep(time.Duration(500+rand.IntN(1500)) * time.Millisecond)
		}
		s.calls.Add(1)
		cctx, cancel := context.WithTimeout(ctx, 30*time.Second) // the hub's command timeout is 10 s
		res, _, err := hc.Command(cctx, a.id, hubapi.CommandRequest{ProjectID: project, Name: name, Args: raw, TimeoutMS: 10_000})
		timedOut := cctx.Err() != nil
		cancel()
		switch {
		case timedOut:
			s.lost.Add(1) // no answer and no error within 3× the command's timeout
			s.log.Warn("a call got no answer", "agent", a.i, "command", name)
			continue
		case err != nil:
			s.transport.Add(1) // the hub is restarting: retry
			continue
		case res.OK:
			s.ok.Add(1)
			if propose {
				s.proposals.Add(1)
			}
			return
		}
		s.refused.Add(1)
		if !propose || !res.Error.Retryable {
			return
		}
		// device_offline "may or may not have run", busy, expired: the same
		// key again, so a proposal that did run is answered as a duplicate.
	}
}

func (s *soak) killer(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a := s.agents[rand.IntN(len(s.agents))]
		a.mu.Lock()
		p := a.p
		a.mu.Unlock()
		if p == nil {
			continue
		}
		p.kill()
		s.kills.Add(1)
		wg.Go(func() {
			time.Sleep(time.Duration(1000+rand.IntN(2000)) * time.Millisecond)
			if err := s.startAgent(context.Background(), a); err != nil {
				s.log.Error("restart agent", "agent", a.i, "err", err)
			}
		})
	}
}

// restartDead starts every agent whose process ended.
func (s *soak) restartDead(ctx context.Context) {
	for _, a := range s.agents {
		a.mu.Lock()
		p := a.p
		a.mu.Unlock()
		select {
		case <-p.done:
			_ = s.startAgent(ctx, a)
		default:
		}
	}
}

func (s *soak) stopAgents() {
	var wg sync.WaitGroup
	for _, a := range s.agents {
		a.mu.Lock()
		p := a.p
		a.mu.Unlock()
		if p != nil {
			wg.Go(p.stop)
		}
	}
	wg.Wait()
}

// check counts proposals stored twice (the same name in one room) and
// audit chains that do not verify.
func (s *soak) check(ctx context.Context) (dups, badChains int) {
	for _, a := range s.agents {
		st, err := rooms.Open(ctx, filepath.Join(a.home, "data", daemon.RoomsDB), nil)
		if err != nil {
			s.log.Error("open store", "agent", a.i, "err", err)
			badChains++
			continue
		}
		ps, err := st.ListProposals(ctx, rooms.ProposalFilter{ProjectID: project, RoomID: a.room})
		st.Close()
		if err != nil {
			s.log.Error("list proposals", "agent", a.i, "err", err)
			continue
		}
		var names []string
		for _, p := range ps {
			names = append(names, p.Name)
		}
		slices.Sort(names)
		dups += len(names) - len(slices.Compact(names))
		rep, err := audit.Verify(filepath.Join(a.home, "state", daemon.AuditDir))
		if err != nil || !rep.OK() {
			s.log.Error("audit chain", "agent", a.i, "err", err, "problems", rep.Problems)
			badChains++
		}
	}
	return dups, badChains
}

type proc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	once    sync.Once
	started time.Time
}

func start(ctx context.Context, bin, logPath string, args ...string) (*proc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = lf, lf
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start roomrelay %s: %w", args[0], err)
	}
	p := &proc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() { cmd.Wait(); lf.Close(); close(p.done) }()
	return p, nil
}

// stop ends the child: SIGTERM, then SIGKILL after 10 s.
func (p *proc) stop() {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

func (p *proc) kill() {
	_ = p.cmd.Process.Kill()
	<-p.done
}

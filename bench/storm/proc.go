//go:build linux

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/roomrelay/roomrelay/bench/internal/benchutil"
)

// hubProc is one run of the hub child process.
type hubProc struct {
	cmd     *exec.Cmd
	done    chan struct{}
	started time.Time
}

// startHub runs `roomrelay hub` with args, its output appended to logPath.
// It gets its own process group (a Ctrl-C of the bench reaches it only
// through the bench) and dies with the bench.
func startHub(bin, home, logPath string, args []string) (*hubProc, error) {
	lf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"HOME=" + home, "ROOMRELAY_HOME=" + home, "PATH=" + os.Getenv("PATH")}
	for kv := range strings.SplitSeq(hubEnv, ",") {
		if kv = strings.TrimSpace(kv); kv != "" {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	cmd.Stdout, cmd.Stderr = lf, lf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		lf.Close()
		return nil, fmt.Errorf("start hub: %w", err)
	}
	p := &hubProc{cmd: cmd, done: make(chan struct{}), started: time.Now()}
	go func() { _ = cmd.Wait(); lf.Close(); close(p.done) }()
	return p, nil
}

func (p *hubProc) pid() int { return p.cmd.Process.Pid }

func (p *hubProc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// signal sends sig and waits for the process to end (SIGKILL after limit).
func (p *hubProc) signal(sig syscall.Signal, limit time.Duration) {
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(limit):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// waitReady polls /v1/readyz until 200.
func waitReady(ctx context.Context, url string, p *hubProc) error {
	hc := &http.Client{Timeout: 2 * time.Second}
	for {
		if p.exited() {
			return fmt.Errorf("the hub exited before it was ready (see its log)")
		}
		if resp, err := hc.Get(url + "/v1/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("hub not ready: %w", ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// clockTicks is USER_HZ; 100 on every Linux this runs on (the kernel ABI
// fixes it for /proc).
const clockTicks = 100

// cpuSeconds is utime+stime from /proc/PID/stat.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	// The command name is in parentheses and may hold spaces: fields
	// count from after the last ')'. utime and stime are fields 14 and 15.
	s := string(b)
	if i := strings.LastIndexByte(s, ')'); i >= 0 {
		s = s[i+1:]
	}
	f := strings.Fields(s)
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// heapBytes is the hub's Go heap in use from its /metrics, when it serves
// one (admin token); 0 when it does not.
func heapBytes(url, token string) int64 {
	return int64(metric(url, token, "go_memstats_heap_inuse_bytes"))
}

// startMS is how long the hub's start took by its own account
// (roomrelay_hub_start_seconds; 0 for a hub without it): under a storm the
// bench's readyz poll waits in the listen backlog with every client's dial,
// so its answer comes later than the hub was ready.
func startMS(url, token string) int64 {
	return int64(metric(url, token, "roomrelay_hub_start_seconds") * 1000)
}

// metric is one unlabelled series of the hub's /metrics (admin token); 0
// when it has none.
func metric(url, token, name string) float64 {
	req, _ := http.NewRequest(http.MethodGet, url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
	if err != nil {
		return 0
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return 0
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, _ := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return f
		}
	}
	return 0
}

// raiseNofile lifts the soft open-files limit to the hard one, for the
// clients here and (inherited) the hub child; it returns the new soft limit.
func raiseNofile() uint64 {
	var r syscall.Rlimit
	if syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r) != nil {
		return 0
	}
	if r.Cur < r.Max {
		r.Cur = r.Max
		_ = syscall.Setrlimit(syscall.RLIMIT_NOFILE, &r)
		_ = syscall.Getrlimit(syscall.RLIMIT_NOFILE, &r)
	}
	return r.Cur
}

// sampler records the peak RSS of a process every 100 ms until stopped
// (VmHWM of the process covers its whole life; this covers a window).
type sampler struct {
	peak int64
	stop chan struct{}
	done chan struct{}
}

func sample(pid int) *sampler {
	s := &sampler{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			s.peak = max(s.peak, benchutil.RSSKiB(pid))
			select {
			case <-s.stop:
				return
			case <-t.C:
			}
		}
	}()
	return s
}

func (s *sampler) end() int64 {
	close(s.stop)
	<-s.done
	return s.peak
}

package main

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/bench/internal/benchutil"
)

// memSnap is where the hub's resident memory is at one moment: the RSS
// and the Go runtime's own figures from the hub's /metrics, so a change in
// RSS can be split into live heap, heap the runtime holds but does not use
// (idle, not yet returned to the OS), goroutine stacks and the rest.
type memSnap struct {
	at                               string
	uptime                           time.Duration
	rssKiB                           int64
	heapInuse, heapIdle, heapRelease float64
	stack, sys                       float64
	goroutines                       float64
}

// memory scrapes the hub's /metrics (admin token) and its RSS.
func (s *soak) memory(ctx context.Context, at string) memSnap {
	m := memSnap{at: at, rssKiB: benchutil.RSSKiB(s.hubProc().cmd.Process.Pid), uptime: time.Since(s.hubProc().started)}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/metrics", nil)
	req.Header.Set("Authorization", "Bearer "+s.admin.Token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return m
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, val, ok := strings.Cut(sc.Text(), " ")
		if !ok || strings.HasPrefix(name, "#") {
			continue
		}
		v, err := strconv.ParseFloat(val, 64)
		if err != nil {
			continue
		}
		switch name {
		case "go_memstats_heap_inuse_bytes":
			m.heapInuse = v
		case "go_memstats_heap_idle_bytes":
			m.heapIdle = v
		case "go_memstats_heap_released_bytes":
			m.heapRelease = v
		case "go_memstats_stack_inuse_bytes":
			m.stack = v
		case "go_memstats_sys_bytes":
			m.sys = v
		case "go_goroutines":
			m.goroutines = v
		}
	}
	return m
}

func printMemory(snaps []memSnap) {
	fmt.Printf("\nhub memory (MiB; idle-kept = heap idle not yet returned to the OS):\n")
	fmt.Printf("| when | hub uptime | RSS | heap in use | idle-kept | stacks | Go sys | goroutines |\n|---|---|---|---|---|---|---|---|\n")
	mib := func(b float64) string { return fmt.Sprintf("%.1f", b/(1<<20)) }
	for _, m := range snaps {
		fmt.Printf("| %s | %s | %.1f | %s | %s | %s | %s | %.0f |\n", m.at, m.uptime.Round(time.Second), float64(m.rssKiB)/1024,
			mib(m.heapInuse), mib(m.heapIdle-m.heapRelease), mib(m.stack), mib(m.sys), m.goroutines)
	}
}

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/roomrelay/roomrelay/relay"
)

// TestResultFramesStayWhole: workers write their results themselves,
// concurrently with each other and with the writer goroutine's events.
// Each result is larger than gorilla's write buffer (written as several
// fragments), so two writers interleaving on the socket would break a
// frame; every frame must arrive whole, each result with its own payload.
func TestResultFramesStayWhole(t *testing.T) {
	hub := newTestHub(t)
	a := newTestAgent(t, hub, "", nil)
	const n, events = 32, 40
	release := make(chan struct{})
	var started sync.WaitGroup
	started.Add(n)
	a.Register("big", func(ctx context.Context, cmd *relay.Command) (any, error) {
		started.Done()
		<-release // all n answer at once
		return strings.Repeat(cmd.ID+";", 12<<10/len(cmd.ID)), nil
	})
	stop, _, _ := start(t, a)
	c := hub.next(t)
	for i := range n {
		c.send(command(fmt.Sprint("big-", i), "big", ""))
	}
	started.Wait()
	// Events go through the writer goroutine while the workers write.
	go func() {
		for i := range events {
			data, _ := json.Marshal(map[string]any{"i": i, "pad": strings.Repeat("e", 8<<10)})
			if err := a.SendEvent(context.Background(), relay.Event{Event: relay.EventProposalDecided, Data: data}); err != nil {
				t.Error(err)
			}
		}
	}()
	close(release)
	results, got := map[string]bool{}, 0
	for len(results) < n || got < events {
		switch f := c.frame(t).(type) {
		case *relay.Result:
			var s string
			if !f.OK || json.Unmarshal(f.Result, &s) != nil || strings.Trim(s, f.ID+";") != "" {
				t.Fatalf("result %s is not its own: ok=%v, %d bytes", f.ID, f.OK, len(f.Result))
			}
			results[f.ID] = true
		case *relay.Event:
			got++
		}
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
}

// BenchmarkCommandRoundTrip: one command at a time from a loopback test
// hub through the agent's reader, a worker and the result's write, with a
// handler that does nothing: the agent's own per-command path.
func BenchmarkCommandRoundTrip(b *testing.B) {
	hub := newTestHub(b)
	a := newTestAgent(b, hub, "", nil)
	a.Register(relay.CmdReadRoom, func(ctx context.Context, cmd *relay.Command) (any, error) { return 1, nil })
	stop, _, _ := start(b, a)
	c := hub.next(b)
	i := 0
	for b.Loop() {
		i++
		c.send(command(fmt.Sprint("n-", i), relay.CmdReadRoom, ""))
		if r := c.result(b); !r.OK {
			b.Fatal(r.Error)
		}
	}
	b.StopTimer()
	if err := stop(); err != nil {
		b.Fatal(err)
	}
}

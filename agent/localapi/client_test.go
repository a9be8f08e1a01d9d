package localapi

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/events"
)

// An agent that never answers fails Do after the client's Timeout instead
// of hanging the caller; the next call works once the agent answers again.
func TestClientTimeoutEndsAHungCall(t *testing.T) {
	t.Parallel()
	hang := make(chan struct{})
	ta := startAPI(t, func(c *Config) {
		c.Status = func() agent.Status {
			<-hang
			return agent.Status{State: agent.StateOnline, PID: os.Getpid()}
		}
	})
	ta.client.Timeout = 50 * time.Millisecond
	errc := make(chan error, 1)
	go func() {
		_, err := ta.client.Do(context.Background(), "GET", "status", nil, nil, nil)
		errc <- err
	}()
	var err error
	select {
	case err = <-errc:
	case <-time.After(10 * time.Second):
		close(hang)
		t.Fatal("GET status on a hung agent did not return")
	}
	close(hang)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("GET status on a hung agent: %v, want context.DeadlineExceeded", err)
	}
	ta.client.Timeout = -1 // none: ctx alone
	if _, err := ta.client.Do(context.Background(), "GET", "status", nil, nil, nil); err != nil {
		t.Fatalf("GET status once the agent answers: %v", err)
	}
}

// The Timeout is per request, not a bound on an event stream: a stream
// stays open and delivers pings long after it.
func TestClientTimeoutSparesStreams(t *testing.T) {
	t.Parallel()
	ta := startAPI(t, func(c *Config) { c.PingEvery = 20 * time.Millisecond })
	ta.client.Timeout = 10 * time.Millisecond
	r := ta.events("")
	for range 5 { // at least 100 ms of stream: ten Timeouts
		for r.next().Type != events.TypePing {
		}
	}
}

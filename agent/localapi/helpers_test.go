package localapi

import (
	"bufio"
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/rooms"
)

// testAPI is a real server on a real unix socket in a temp dir, with a real
// rooms store and audit log.
type testAPI struct {
	t       testing.TB
	srv     *Server
	client  *Client
	store   *rooms.Store
	audit   *audit.Log
	dir     string
	cfg     Config
	decided []string
	mu      sync.Mutex
	cancel  context.CancelFunc
	done    chan error
}

func startAPI(t testing.TB, adjust func(*Config)) *testAPI {
	t.Helper()
	dir := t.TempDir()
	ctx := context.Background()
	store, err := rooms.Open(ctx, filepath.Join(dir, "rooms.db"), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	al, err := audit.Open(filepath.Join(dir, "audit"), audit.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { al.Close() })
	ta := &testAPI{t: t, store: store, audit: al, dir: dir}
	cfg := Config{
		Listen:    ListenConfig{StateDir: filepath.Join(dir, "state")},
		ConfigDir: filepath.Join(dir, "config"),
		Version:   "test",
		Status: func() agent.Status {
			return agent.Status{State: agent.StateOnline, Hub: "https://hub.example", DeviceID: "dev_1", PID: os.Getpid()}
		},
		Proposals: store,
		Audit:     al,
		Decided: func(_ context.Context, p rooms.Proposal) {
			ta.mu.Lock()
			ta.decided = append(ta.decided, p.ID+":"+p.State+":"+p.DecidedVia)
			ta.mu.Unlock()
		},
	}
	if adjust != nil {
		adjust(&cfg)
	}
	ta.cfg = cfg
	srv, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ta.srv = srv
	rctx, cancel := context.WithCancel(ctx)
	ta.cancel = cancel
	ta.done = make(chan error, 1)
	go func() { ta.done <- srv.Run(rctx) }()
	ta.client = NewClient(srv.Endpoint())
	ta.client.Name = "localapi-test/1"
	t.Cleanup(ta.stop)
	return ta
}

func (ta *testAPI) stop() {
	if ta.cancel == nil {
		return
	}
	ta.cancel()
	ta.cancel = nil
	ta.client.Close()
	if err := <-ta.done; err != nil {
		ta.t.Errorf("Run: %v", err)
	}
}

// dialRaw opens a bare connection to ep (a unix socket, or the pipe on
// Windows), for tests that speak HTTP by hand.
func dialRaw(ep Endpoint) (net.Conn, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return dialEndpoint(ctx, ep)
}

// raw sends a request with the given headers and returns status, headers
// and the decoded body.
func (ta *testAPI) raw(method, path string, hdr map[string]string, body string) (int, http.Header, map[string]any) {
	ta.t.Helper()
	var rd *strings.Reader
	if body != "" {
		rd = strings.NewReader(body)
	} else {
		rd = strings.NewReader("")
	}
	req, err := http.NewRequest(method, "http://"+Host+path, rd)
	if err != nil {
		ta.t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := ta.client.hc.Do(req)
	if err != nil {
		ta.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return resp.StatusCode, resp.Header, m
}

func errCode(m map[string]any) string {
	e, _ := m["error"].(map[string]any)
	c, _ := e["code"].(string)
	return c
}

// eventReader reads an event stream line by line.
type eventReader struct {
	t    testing.TB
	resp *http.Response
	sc   *bufio.Scanner
}

func (ta *testAPI) events(query string) *eventReader {
	ta.t.Helper()
	resp, err := ta.client.Stream(context.Background(), "events"+query)
	if err != nil {
		ta.t.Fatal(err)
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	er := &eventReader{t: ta.t, resp: resp, sc: sc}
	ta.t.Cleanup(er.close)
	return er
}

func (er *eventReader) close() { er.resp.Body.Close() }

// next returns the next line, skipping pings unless wantPing; it fails the
// test after 10 s.
func (er *eventReader) next() Event {
	er.t.Helper()
	type res struct {
		e   Event
		err error
	}
	ch := make(chan res, 1)
	go func() {
		if !er.sc.Scan() {
			ch <- res{err: er.sc.Err()}
			return
		}
		var e Event
		err := json.Unmarshal(er.sc.Bytes(), &e)
		ch <- res{e, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil || r.e.Type == "" {
			er.t.Fatalf("event stream: %v (line %q)", r.err, er.sc.Text())
		}
		return r.e
	case <-time.After(10 * time.Second):
		er.t.Fatal("no event line within 10 s")
	}
	return Event{}
}

// nextNonPing skips ping lines.
func (er *eventReader) nextNonPing() Event {
	for {
		if e := er.next(); e.Type != events.TypePing {
			return e
		}
	}
}

// auditLines returns the audit entries with the command.
func (ta *testAPI) auditLines(cmd string) []audit.Entry {
	es, err := ta.audit.Query(audit.Filter{})
	if err != nil {
		ta.t.Fatal(err)
	}
	var out []audit.Entry
	for _, e := range es {
		if e.Command == cmd {
			out = append(out, e)
		}
	}
	return out
}

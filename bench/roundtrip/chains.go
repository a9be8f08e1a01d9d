package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gorilla/websocket"
	natsserver "github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/relay"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hub/hubclient"
	"github.com/roomrelay/roomrelay/relay/hub/mcpfront"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

const project = "bench-project"

// hubEnv is an embedded hub served over loopback.
type hubEnv struct {
	h     *hub.Hub
	url   string
	admin *hubclient.Client
	srv   *http.Server
	stop  context.CancelFunc
	done  chan error
}

func startHub(ctx context.Context, dir string, log *slog.Logger) (*hubEnv, error) {
	hubDir := filepath.Join(dir, "hub")
	tok, err := hub.LoadOrCreateAdminToken(hubDir)
	if err != nil {
		return nil, err
	}
	h, err := hub.New(hub.Config{DataDir: hubDir, AdminToken: tok, Logger: log})
	if err != nil {
		return nil, err
	}
	hctx, stop := context.WithCancel(ctx)
	e := &hubEnv{h: h, stop: stop, done: make(chan error, 1)}
	go func() { e.done <- h.Run(hctx) }()
	select {
	case <-h.Ready():
	case err := <-e.done:
		return nil, fmt.Errorf("hub did not start: %w", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		stop()
		return nil, err
	}
	// The hub's API and its MCP front, as `roomrelay hub serve` mounts
	// them (without OAuth: the MCP chain uses a client token). The front's
	// per-token rate is far above what the bench sends.
	front, err := mcpfront.New(mcpfront.Config{Hub: h, Logger: log, TokenRate: 100_000_000, TokenBurst: 1_000_000})
	if err != nil {
		stop()
		return nil, err
	}
	mux := http.NewServeMux()
	front.Mount(mux)
	mux.Handle("/", h.Handler())
	e.srv = &http.Server{Handler: mux}
	go e.srv.Serve(ln)
	e.url = "http://" + ln.Addr().String()
	e.admin = hubclient.New(e.url, tok)
	e.admin.HTTP = pooled()
	return e, nil
}

func (e *hubEnv) close() {
	e.srv.Close()
	e.stop()
	<-e.done
}

func (e *hubEnv) enroll(ctx context.Context, name string) (*hubapi.Enrollment, error) {
	pc, err := e.admin.Pair(ctx, project, 0)
	if err != nil {
		return nil, err
	}
	return hubclient.New(e.url, "").Enroll(ctx, pc.Code, name, runtime.GOOS, "")
}

func (e *hubEnv) waitOnline(ctx context.Context, dev string) error {
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		d, err := e.admin.Device(ctx, dev)
		if err == nil && d.Presence.State == hubapi.StateOnline {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("device %s never came online", dev)
}

// agentChain is the real device daemon, with its default settings.
type agentChain struct {
	e    *hubEnv
	dev  string
	d    *daemon.Daemon
	stop context.CancelFunc
	done chan error
}

func (e *hubEnv) realAgent(ctx context.Context, dir string, log *slog.Logger) (*agentChain, error) {
	enr, err := e.enroll(ctx, "bench-laptop")
	if err != nil {
		return nil, err
	}
	home := filepath.Join(dir, "device")
	cfgDir := filepath.Join(home, "config")
	if err := os.MkdirAll(cfgDir, 0o700); err != nil {
		return nil, err
	}
	// The three read tools, with a rate limit far above what the bench
	// sends (the default is 120/min): the bench measures the path, not the
	// limiter.
	pol := "version 1\nproject " + project + "\n  enabled yes\n  commands read_room list_room_apps read_room_app_status\n  rate 1000000/min burst 100000\n"
	if err := os.WriteFile(filepath.Join(cfgDir, daemon.PolicyFile), []byte(pol), 0o600); err != nil {
		return nil, err
	}
	d, err := daemon.Open(ctx, daemon.Config{ConfigDir: cfgDir, StateDir: filepath.Join(home, "state"), DataDir: filepath.Join(home, "data"),
		HubURL: e.url, DeviceID: enr.DeviceID, Token: enr.Token, Version: "bench", OS: runtime.GOOS, Logger: log})
	if err != nil {
		return nil, err
	}
	s := d.Store()
	if _, err := s.CreateProject(ctx, project, project); err != nil {
		return nil, err
	}
	if _, err := s.CreateRoom(ctx, rooms.NewRoom{ID: "room-1", ProjectID: project, Name: "Standup"}); err != nil {
		return nil, err
	}
	if _, err := s.AddApp(ctx, rooms.NewApp{ProjectID: project, RoomID: "room-1", Name: "Timer", Source: rooms.SourceSnippet,
		Files: map[string]string{"src/App.tsx": "export default function App(){return null}"}}); err != nil {
		return nil, err
	}
	actx, stop := context.WithCancel(ctx)
	a := &agentChain{e: e, dev: enr.DeviceID, d: d, stop: stop, done: make(chan error, 1)}
	go func() { a.done <- d.Run(actx) }()
	if err := e.waitOnline(ctx, a.dev); err != nil {
		a.close()
		return nil, err
	}
	return a, nil
}

func (a *agentChain) call(ctx context.Context) (bool, string) { return hubCall(ctx, a.e, a.dev) }

func (a *agentChain) close() {
	a.stop()
	<-a.done
	a.d.Close()
}

// trivialChain is a raw protocol client enrolled as a second device: it
// answers every command with an empty result at once.
type trivialChain struct {
	e    *hubEnv
	dev  string
	conn *websocket.Conn
	done chan struct{}
}

func (e *hubEnv) trivialAgent(ctx context.Context) (*trivialChain, error) {
	enr, err := e.enroll(ctx, "bench-trivial")
	if err != nil {
		return nil, err
	}
	d := websocket.Dialer{Subprotocols: []string{relay.Subprotocol}}
	wsURL, err := agent.ConnectURL(e.url)
	if err != nil {
		return nil, err
	}
	conn, _, err := d.DialContext(ctx, wsURL, http.Header{"Authorization": {"Bearer " + enr.Token}})
	if err != nil {
		return nil, fmt.Errorf("trivial agent: %w", err)
	}
	hello, _ := relay.Encode(&relay.Hello{Protocol: relay.ProtocolVersion, AgentVersion: "bench", DeviceID: enr.DeviceID, OS: runtime.GOOS,
		Policy: []relay.ProjectPolicy{{Project: project, Commands: []string{relay.CmdReadRoom}}}})
	if err := conn.WriteMessage(websocket.TextMessage, hello); err != nil {
		return nil, err
	}
	if _, _, err := conn.ReadMessage(); err != nil { // welcome
		return nil, fmt.Errorf("trivial agent: no welcome: %w", err)
	}
	t := &trivialChain{e: e, dev: enr.DeviceID, conn: conn, done: make(chan struct{})}
	go t.serve()
	if err := e.waitOnline(ctx, t.dev); err != nil {
		t.close()
		return nil, err
	}
	return t, nil
}

// serve answers on the reader goroutine: gorilla allows one concurrent
// writer besides the reader, and this is the only writer (pongs aside,
// which gorilla writes under its own lock).
func (t *trivialChain) serve() {
	defer close(t.done)
	for {
		_, data, err := t.conn.ReadMessage()
		if err != nil {
			return
		}
		f, err := relay.Decode(data, 0)
		if err != nil {
			continue
		}
		if c, ok := f.(*relay.Command); ok {
			res, _ := relay.Encode(&relay.Result{ID: c.ID, OK: true, Result: json.RawMessage(`{}`)})
			if t.conn.WriteMessage(websocket.TextMessage, res) != nil {
				return
			}
		}
	}
}

func (t *trivialChain) call(ctx context.Context) (bool, string) { return hubCall(ctx, t.e, t.dev) }

func (t *trivialChain) close() {
	t.conn.Close()
	<-t.done
}

// floorChain is HTTP → NATS request → a subscriber that forwards the body
// over one websocket to an echo client → the echo comes back → NATS reply
// → HTTP response. No hub code.
type floorChain struct {
	ns      *natsserver.Server
	nc      *nats.Conn
	srv     *http.Server
	url     string
	client  *http.Client
	echo    *websocket.Conn
	closers []func()
}

func startFloor(ctx context.Context) (*floorChain, error) {
	ns, err := natsserver.NewServer(&natsserver.Options{DontListen: true, NoSigs: true, NoLog: true})
	if err != nil {
		return nil, err
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		return nil, errors.New("floor: nats-server not ready")
	}
	f := &floorChain{ns: ns, client: pooled()}
	f.closers = append(f.closers, ns.Shutdown)
	// The requester and the socket holder are separate connections, as two
	// hub nodes would be.
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		f.close()
		return nil, err
	}
	f.nc = nc
	f.closers = append(f.closers, nc.Close)
	holder, err := nats.Connect("", nats.InProcessServer(ns))
	if err != nil {
		f.close()
		return nil, err
	}
	f.closers = append(f.closers, holder.Close)

	// The websocket server side: one socket, frames "id\x00body".
	var (
		wmu     sync.Mutex
		sock    *websocket.Conn
		pending sync.Map // id → reply subject
		seq     atomic.Int64
		ready   = make(chan struct{})
	)
	up := websocket.Upgrader{}
	wsMux := http.NewServeMux()
	wsMux.HandleFunc("/ws", func(w http.ResponseWriter, r *http.Request) {
		c, err := up.Upgrade(w, r, nil)
		if err != nil {
			return
		}
		sock = c
		close(ready)
		for {
			_, data, err := c.ReadMessage()
			if err != nil {
				return
			}
			id, body := split(data)
			if reply, ok := pending.LoadAndDelete(id); ok {
				_ = holder.Publish(reply.(string), body)
			}
		}
	})
	wsLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.close()
		return nil, err
	}
	wsSrv := &http.Server{Handler: wsMux}
	go wsSrv.Serve(wsLn)
	f.closers = append(f.closers, func() { wsSrv.Close() })

	echo, _, err := websocket.DefaultDialer.DialContext(ctx, "ws://"+wsLn.Addr().String()+"/ws", nil)
	if err != nil {
		f.close()
		return nil, err
	}
	f.echo = echo
	f.closers = append(f.closers, func() { echo.Close() })
	go func() {
		for {
			_, data, err := echo.ReadMessage()
			if err != nil {
				return
			}
			if echo.WriteMessage(websocket.TextMessage, data) != nil {
				return
			}
		}
	}()
	<-ready
	if _, err := holder.Subscribe("floor.cmd", func(m *nats.Msg) {
		id := strconv.FormatInt(seq.Add(1), 10)
		pending.Store(id, m.Reply)
		wmu.Lock()
		defer wmu.Unlock()
		_ = sock.WriteMessage(websocket.TextMessage, append([]byte(id+"\x00"), m.Data...))
	}); err != nil {
		f.close()
		return nil, err
	}
	if err := holder.Flush(); err != nil {
		f.close()
		return nil, err
	}

	mux := http.NewServeMux()
	mux.HandleFunc("POST /cmd", func(w http.ResponseWriter, r *http.Request) {
		var body json.RawMessage
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		m, err := nc.RequestWithContext(r.Context(), "floor.cmd", body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusGatewayTimeout)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(m.Data)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		f.close()
		return nil, err
	}
	f.srv = &http.Server{Handler: mux}
	go f.srv.Serve(ln)
	f.closers = append(f.closers, func() { f.srv.Close() })
	f.url = "http://" + ln.Addr().String() + "/cmd"
	return f, nil
}

func split(b []byte) (string, []byte) {
	for i, c := range b {
		if c == 0 {
			return string(b[:i]), b[i+1:]
		}
	}
	return "", nil
}

func (f *floorChain) call(ctx context.Context) (bool, string) {
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, f.url, jsonBody(`{"name":"read_room","args":{"room_id":"room-1"}}`))
	resp, err := f.client.Do(req)
	if err != nil {
		return false, "transport"
	}
	var v json.RawMessage
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	return err == nil && resp.StatusCode == http.StatusOK, ""
}

func (f *floorChain) close() {
	for i := len(f.closers) - 1; i >= 0; i-- {
		f.closers[i]()
	}
}

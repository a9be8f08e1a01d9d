package provider

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/relay"
)

// childEnv makes the test binary an install-queue agent (store, provider
// endpoint, installer) instead of running tests: ROOMS_DB|STATE_DIR (the
// endpoint is the local API's for that state dir).
const childEnv = "ROOMRELAY_PROVIDER_TEST_CHILD"

func TestMain(m *testing.M) {
	if v := os.Getenv(childEnv); v != "" {
		runChild(v)
		return
	}
	os.Exit(m.Run())
}

// runChild serves the provider endpoint and runs the install queue until
// killed.
func runChild(arg string) {
	var db, dir string
	for i := range arg {
		if arg[i] == '|' {
			db, dir = arg[:i], arg[i+1:]
		}
	}
	ctx := context.Background()
	st, err := rooms.Open(ctx, db, nil)
	if err != nil {
		panic(err)
	}
	var inst *Installer
	srv := New(Config{Version: "child", OnChange: func(c bool, _ AppInfo) {
		if c {
			inst.Kick()
		}
	}})
	inst = NewInstaller(st, srv, nil, nil)
	inst.MinBackoff, inst.MaxBackoff = 10*time.Millisecond, 50*time.Millisecond
	// A socket the killed child left is replaced (Listen's stale check).
	ln, _, err := localapi.Listen(localapi.ListenConfig{StateDir: dir})
	if err != nil {
		panic(err)
	}
	go (&http.Server{Handler: srv, ReadHeaderTimeout: 5 * time.Second}).Serve(ln)
	inst.Run(ctx)
}

// appState is the fake desktop app's own install record, kept across its
// connections: it installs a proposal once and answers repeats from it.
type appState struct {
	mu         sync.Mutex
	installed  map[string]string // proposal id → instance id
	installs   int               // apps really installed
	deliveries []string          // proposal ids of every apps.install received
	holdAcks   bool              // install but do not answer (the agent dies first)
}

func (s *appState) answer(_ *fakeApp, m message) string {
	if m.Method != MethodAppsInstall {
		return `"error":{"code":-32601,"message":"no"}`
	}
	var p struct {
		ProposalID  string            `json:"proposal_id"`
		InstanceID  string            `json:"instance_id"`
		Files       map[string]string `json:"files"`
		ContentHash string            `json:"content_hash"`
	}
	_ = json.Unmarshal(m.Params, &p)
	s.mu.Lock()
	defer s.mu.Unlock()
	s.deliveries = append(s.deliveries, p.ProposalID)
	if relay.ContentHash(p.Files) != p.ContentHash {
		return `"error":{"code":-32000,"message":"hash","data":{"code":"invalid_args"}}`
	}
	if _, dup := s.installed[p.ProposalID]; !dup {
		s.installed[p.ProposalID] = p.InstanceID
		s.installs++
	}
	if s.holdAcks {
		return ""
	}
	return `"result":{"instance_id":"` + s.installed[p.ProposalID] + `"}`
}

func (s *appState) delivered() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.deliveries)
}

// TestInstallExactlyOnceAcrossKill: the agent is killed with SIGKILL after
// the approval and before any delivery, then after a delivery the app took
// but before its acknowledgement reached the agent; the app ends with the
// app installed once, and the queue says installed.
func TestInstallExactlyOnceAcrossKill(t *testing.T) {
	dir, err := os.MkdirTemp("", "rrinst")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	db, stateDir := filepath.Join(dir, "rooms.db"), filepath.Join(dir, "state")
	ctx := context.Background()
	st, err := rooms.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.SyncProviderRooms(ctx, []rooms.ProviderRoom{{ID: "r1", Project: "p1", Name: "Room"}}); err != nil {
		t.Fatal(err)
	}
	files := map[string]string{"src/App.tsx": "export default function App() { return <p>hi</p> }"}
	p, _, err := st.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p1", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "Hi",
		Files: files, IdempotencyKey: "k1", Provider: rooms.ProviderApp})
	if err != nil {
		t.Fatal(err)
	}
	approved, err := st.ApproveProposal(ctx, p.ID, p.ContentHash)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()

	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+db+"|"+stateDir)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
		return cmd
	}
	kill := func(cmd *exec.Cmd) {
		if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		_ = cmd.Wait()
	}
	ts := &testServer{ep: endpointFor(t, stateDir)}
	connect := func(state *appState) *fakeApp {
		var conn *fakeApp
		testutil.Eventually(t, "the child never served its socket", func() bool {
			c, _, err := dial(t, ts, Subprotocol)
			if err != nil {
				return false
			}
			c.Close()
			return true
		})
		conn = connectChildApp(t, ts, state.answer)
		return conn
	}
	state := &appState{installed: map[string]string{}, holdAcks: true}

	// 1. Killed between approval and delivery: no app was connected.
	kill(start())
	// 2. Delivered; the app installs it, and the agent dies before the ack.
	child := start()
	app := connect(state)
	testutil.Eventually(t, "no apps.install delivered", func() bool { return state.delivered() >= 1 })
	kill(child)
	<-app.done
	// 3. Restarted: delivered again; the app dedupes by proposal id and acks.
	state.mu.Lock()
	state.holdAcks = false
	state.mu.Unlock()
	start()
	connect(state)
	st, err = rooms.Open(ctx, db, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	testutil.Eventually(t, "the install never became installed", func() bool {
		in, err := st.InstallOf(ctx, approved.InstanceID)
		return err == nil && in.State == rooms.InstallInstalled
	})
	state.mu.Lock()
	defer state.mu.Unlock()
	if state.installs != 1 || state.installed[p.ID] != approved.InstanceID {
		t.Fatalf("the app installed %d times (%v), want once as %s", state.installs, state.installed, approved.InstanceID)
	}
	for _, d := range state.deliveries {
		if d != p.ID {
			t.Fatalf("deliveries %v", state.deliveries)
		}
	}
	if len(state.deliveries) < 2 {
		t.Fatalf("deliveries %v: the unacknowledged one was not delivered again", state.deliveries)
	}
}

// connectChildApp is connectApp for a server in another process (no
// registry to wait on: the hello answer is enough, and the install arrives
// on its own).
func connectChildApp(t *testing.T, ts *testServer, answer answerFunc) *fakeApp {
	t.Helper()
	conn, _, err := dial(t, ts, Subprotocol)
	if err != nil {
		t.Fatal(err)
	}
	app := &fakeApp{t: t, conn: conn, done: make(chan struct{})}
	caps, _ := json.Marshal(allCaps)
	if err := conn.WriteMessage(1, []byte(`{"jsonrpc":"2.0","id":1,"method":"provider.hello","params":{"protocol_versions":[1],"app":{"name":"Fake","version":"1"},"capabilities":`+string(caps)+`}}`)); err != nil {
		t.Fatal(err)
	}
	if _, _, err := conn.ReadMessage(); err != nil {
		t.Fatal(err)
	}
	go app.serve(answer)
	t.Cleanup(func() { conn.Close(); <-app.done })
	return app
}

type recorded struct {
	typ  string
	data events.Payload
}

type recorder struct {
	mu  sync.Mutex
	evs []recorded
}

func (r *recorder) Publish(p events.Payload) {
	r.mu.Lock()
	r.evs = append(r.evs, recorded{p.EventType(), p})
	r.mu.Unlock()
}

func (r *recorder) got() []recorded {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]recorded(nil), r.evs...)
}

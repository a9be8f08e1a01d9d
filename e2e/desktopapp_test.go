package e2e

import (
	"bufio"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// appProc is examples/desktop-app running against the world's agent, with
// its prompt on stdin and its stable lines ("ready:", "installed:" …) read
// from stdout.
type appProc struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	out   []string
	done  bool // stdout closed
}

func startDesktopApp(t *testing.T, w *binWorld, data string) *appProc {
	t.Helper()
	dir, err := filepath.Abs(filepath.Join("..", "examples", "desktop-app"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@roomrelay", "localapi")); err != nil {
		skipUnlessRequired(t, "ROOMRELAY_REQUIRE_TSCLIENT", "examples/desktop-app/node_modules is missing (cd examples/desktop-app && npm ci)")
	}
	c := exec.Command("node", "app.mjs", "--home", w.devHome, "--data", data, "--project", "proj-a")
	c.Dir = dir
	c.Env = append(os.Environ(), "ROOMRELAY_HOME=")
	c.WaitDelay = 5 * time.Second
	a := &appProc{t: t, cmd: c}
	if a.stdin, err = c.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := c.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.Stderr = c.Stdout
	if err := c.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			a.mu.Lock()
			a.out = append(a.out, sc.Text())
			a.mu.Unlock()
		}
		a.mu.Lock()
		a.done = true
		a.mu.Unlock()
	}()
	t.Cleanup(func() {
		_ = c.Process.Kill()
		_ = c.Wait()
		if t.Failed() {
			t.Logf("desktop app output:\n%s", a.output())
		}
	})
	return a
}

func (a *appProc) output() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return strings.Join(a.out, "\n")
}

// expect waits until some line of the app's output matches re and returns
// its submatches (lines are not consumed: two awaited lines may come in
// either order, e.g. "approved:" and the "installed:" that races it).
func (a *appProc) expect(re string) []string {
	a.t.Helper()
	rx := regexp.MustCompile(re)
	deadline := time.Now().Add(30 * time.Second)
	for {
		a.mu.Lock()
		for _, l := range a.out {
			if m := rx.FindStringSubmatch(l); m != nil {
				a.mu.Unlock()
				return m
			}
		}
		done := a.done
		a.mu.Unlock()
		if done {
			a.t.Fatalf("the desktop app exited before a line matching %q", re)
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("no desktop app line matching %q within 30 s", re)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (a *appProc) send(line string) {
	a.t.Helper()
	if _, err := io.WriteString(a.stdin, line+"\n"); err != nil {
		a.t.Fatalf("desktop app stdin: %v", err)
	}
}

// hubCall runs `roomrelay hub call` as the admin and decodes its result.
func (w *binWorld) hubCall(command string, args any) (ok bool, code string, raw string) {
	w.t.Helper()
	b, _ := json.Marshal(args)
	c := w.cmd(w.hubHome, "hub", "call", w.deviceID, command, "--project", "proj-a", "--args", string(b), "--hub", w.hubURL)
	c.WaitDelay = time.Minute
	out, _ := c.Output()
	var r struct {
		OK    bool `json:"ok"`
		Error *struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	if i := strings.IndexByte(string(out), '{'); i >= 0 {
		_ = json.Unmarshal(out[i:], &r)
	}
	if r.Error != nil {
		code = r.Error.Code
	}
	return r.OK, code, string(out)
}

// TestDesktopApp: the example desktop app as a new user runs it. The cloud
// reads the Room the app keeps in its own file; the app closes and the
// cloud sees app_not_running; a proposal waits; the app reopens, shows it,
// the owner approves it at the app's prompt (bound to the hash the app
// computed) and the app installs it into its file.
func TestDesktopApp(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	ts := needTSClient(t)
	compileTSClient(t, ts)
	w := startBinWorld(t, "provider app")
	w.run(w.devHome, "enable", "--allow", "propose_room_snippet_app", "proj-a")
	data := filepath.Join(t.TempDir(), "rooms.json")

	app := startDesktopApp(t, w, data)
	app.expect(`^relay: online`)
	app.expect(`^ready: provider connected .*projects proj-a`)
	eventually(t, "read_room of the app's room", func() bool {
		ok, _, _ := w.hubCall("read_room", map[string]string{"room_id": "team-standup"})
		return ok
	})
	if _, _, raw := w.hubCall("read_room", map[string]string{"room_id": "team-standup"}); !strings.Contains(raw, "Team standup") {
		t.Fatalf("read_room of the app's room: %s", raw)
	}
	app.send("quit")
	app.expect(`^bye`)
	eventually(t, "app_not_running once the app closed", func() bool {
		_, code, _ := w.hubCall("read_room", map[string]string{"room_id": "team-standup"})
		return code == "app_not_running"
	})
	files := map[string]string{"src/App.tsx": "export default function App() { return <p>15:00</p> }\n"}
	if ok, _, raw := w.hubCall("propose_room_snippet_app", map[string]any{"room_id": "team-standup", "name": "Standup timer", "files": files, "idempotency_key": "desktop-app-e2e-1"}); !ok {
		t.Fatalf("propose while the app is closed: %s", raw)
	}

	app = startDesktopApp(t, w, data)
	m := app.expect(`^approval needed: (\S+) "Standup timer"`)
	app.expect(`^ready: provider connected`)
	app.send("approve " + m[1])
	app.expect(`^approved: ` + regexp.QuoteMeta(m[1]))
	inst := app.expect(`^installed: "Standup timer" as (\S+) in room team-standup`)
	b, err := os.ReadFile(data)
	if err != nil || !strings.Contains(string(b), inst[1]) || !strings.Contains(string(b), "15:00") {
		t.Fatalf("the app's own file after the install (%v):\n%s", err, b)
	}
	ok, _, raw := w.hubCall("list_room_apps", map[string]string{"room_id": "team-standup"})
	if !ok || !strings.Contains(raw, inst[1]) {
		t.Fatalf("list_room_apps after the install: %s", raw)
	}
	app.send("quit")
	app.expect(`^bye`)
}

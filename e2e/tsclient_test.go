package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// The TypeScript local API client (clients/ts) against a real agent: the
// roomrelay binary as a hub process and a `roomrelay run` process on
// temporary homes, then `node --test` in clients/ts with the world in
// ROOMRELAY_TS_* variables. It needs node and `npm ci` there; without them
// the test skips, unless ROOMRELAY_REQUIRE_TSCLIENT=1 (CI), then it fails.

const tsclientDirName = "../clients/ts"

// needTSClient returns the absolute path of clients/ts once node ≥ 20 and
// its node_modules are there, else skips (or fails when required).
func needTSClient(t *testing.T) string {
	t.Helper()
	dir, err := filepath.Abs(tsclientDirName)
	if err != nil {
		t.Fatal(err)
	}
	missing := nodeMissing(dir, "typescript", "")
	if missing == "" {
		return dir
	}
	skipUnlessRequired(t, "ROOMRELAY_REQUIRE_TSCLIENT", missing+"; to run the TypeScript client suite: install Node ≥ 20 and npm, then `cd clients/ts && npm ci`")
	return ""
}

// binWorld is a hub and an agent run from the roomrelay binary, as a user
// runs them in two terminals.
type binWorld struct {
	t                *testing.T
	bin              string
	hubHome, devHome string
	hubURL           string
	deviceID         string
	agent            *exec.Cmd
	agentLog         *bytes.Buffer
}

func (w *binWorld) cmd(home string, args ...string) *exec.Cmd {
	c := exec.Command(w.bin, args...)
	c.Env = []string{"ROOMRELAY_HOME=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
	return c
}

// run runs the binary to the end and fails the test on a non-zero exit.
func (w *binWorld) run(home string, args ...string) string {
	w.t.Helper()
	out, err := w.cmd(home, args...).CombinedOutput()
	if err != nil {
		w.t.Fatalf("roomrelay %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

// start starts a long-running roomrelay process, stopped at cleanup.
func (w *binWorld) start(home string, args ...string) (*exec.Cmd, *bytes.Buffer) {
	w.t.Helper()
	c := w.cmd(home, args...)
	logs := &bytes.Buffer{}
	c.Stdout, c.Stderr = logs, logs
	if err := c.Start(); err != nil {
		w.t.Fatal(err)
	}
	w.t.Cleanup(func() {
		if c.ProcessState == nil {
			_ = c.Process.Kill()
			_ = c.Wait()
		}
		if w.t.Failed() {
			w.t.Logf("roomrelay %s output:\n%s", strings.Join(args, " "), logs.String())
		}
	})
	return c, logs
}

// startBinWorld starts a hub, enrolls an agent for project proj-a with room
// r1 in its builtin store, enables the project and runs the agent; it
// returns once the agent's local API answers (its discovery file exists).
// policyExtra (top-level policy directives) goes into the policy file
// before the agent starts.
func startBinWorld(t *testing.T, policyExtra string) *binWorld {
	t.Helper()
	w := &binWorld{t: t, bin: roomrelayBin(t), hubHome: t.TempDir(), devHome: t.TempDir()}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	w.hubURL = "http://" + addr
	// --public-url turns the hub's OAuth authorization server on, for the
	// device approval through the local API (oauth.test.js).
	w.start(w.hubHome, "hub", "--listen", addr, "--public-url", w.hubURL, "--heartbeat", "1s")
	eventually(t, "hub up", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	var pc struct{ Code string }
	if err := json.Unmarshal([]byte(w.run(w.hubHome, "hub", "pair", "--project", "proj-a", "--hub", w.hubURL, "--json")), &pc); err != nil {
		t.Fatal(err)
	}
	w.run(w.devHome, "enroll", "--hub", w.hubURL, "--code", pc.Code, "--credential-store", "file")
	w.run(w.devHome, "rooms", "create", "--project", "proj-a", "--name", "Standup", "--id", "r1")
	w.run(w.devHome, "enable", "proj-a")
	if policyExtra != "" {
		p := filepath.Join(w.devHome, "config", "policy")
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatalf("the policy file: %v", err)
		}
		// Top-level directives (provider) go before the first project,
		// after the version line.
		src := policyExtra + "\n" + string(b)
		if v, rest, ok := strings.Cut(string(b), "\n"); ok && strings.HasPrefix(v, "version") {
			src = v + "\n" + policyExtra + "\n" + rest
		}
		if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var cfg struct {
		DeviceID string `json:"device_id"`
	}
	b, _ := os.ReadFile(filepath.Join(w.devHome, "config", "config.json"))
	if err := json.Unmarshal(b, &cfg); err != nil || cfg.DeviceID == "" {
		t.Fatalf("config.json: %v %s", err, b)
	}
	w.deviceID = cfg.DeviceID
	w.agent, w.agentLog = w.start(w.devHome, "run", "--no-sandbox")
	eventually(t, "the agent online", func() bool { return w.cmd(w.devHome, "status", "--json").Run() == nil })
	eventually(t, "the agent's localapi.json", func() bool {
		_, err := os.Stat(filepath.Join(w.devHome, "config", "localapi.json"))
		return err == nil
	})
	return w
}

func (w *binWorld) env() []string {
	return []string{
		"ROOMRELAY_TS_AGENT_HOME=" + w.devHome,
		"ROOMRELAY_TS_BIN=" + w.bin,
		"ROOMRELAY_TS_HUB_HOME=" + w.hubHome,
		"ROOMRELAY_TS_HUB_URL=" + w.hubURL,
		"ROOMRELAY_TS_DEVICE_ID=" + w.deviceID,
		"ROOMRELAY_TS_PROJECT=proj-a",
		"ROOMRELAY_TS_ROOM=r1",
	}
}

var nodeTestCount = regexp.MustCompile(`(?m)^# (pass|fail|skipped|cancelled|todo) (\d+)$`)

// runNodeTest compiles clients/ts (tsc) and runs node --test on the given
// compiled test files; it fails the test when node fails or when any test
// was skipped or none ran (the suite must not pass by skipping).
func runNodeTest(t *testing.T, dir string, env []string, files ...string) string {
	t.Helper()
	compileTSClient(t, dir)
	ctx, cancel := context.WithTimeout(context.Background(), nodeScriptTimeout)
	defer cancel()
	// --test-force-exit: a handle a failing test left open must not hold the run to the timeout.
	args := append([]string{"--test", "--test-force-exit", "--test-reporter=tap"}, files...)
	stdout, stderr, err := runNodeScriptCtx(ctx, dir, env, "node", args...)
	counts := map[string]int{}
	for _, m := range nodeTestCount.FindAllStringSubmatch(stdout, -1) {
		counts[m[1]], _ = strconv.Atoi(m[2])
	}
	if err != nil || counts["fail"] > 0 || counts["cancelled"] > 0 {
		t.Fatalf("node --test %s: %v\nstdout:\n%s\nstderr:\n%s", strings.Join(files, " "), err, stdout, stderr)
	}
	// The one skip allowed: the OpenAPI check while the agent serves the
	// document's empty placeholder (agent/localapi/openapi.json is {}).
	skipped := counts["skipped"] - strings.Count(stdout, "# SKIP OPENAPI-PENDING")
	if counts["pass"] == 0 || skipped > 0 || counts["todo"] > 0 {
		t.Fatalf("node --test %s: %d passed, %d skipped: the suite must run, not skip\nstdout:\n%s", strings.Join(files, " "), counts["pass"], counts["skipped"], stdout)
	}
	t.Logf("node --test %s: %d passed", strings.Join(files, " "), counts["pass"])
	return stdout
}

// TestTSClient runs clients/ts's suite against a real agent: discovery,
// status, typed errors, the served OpenAPI document, projects with If-Match,
// event resume and resync, and proposals made through the hub and approved
// by content hash; and an MCP client's sign-in approved for the device
// through the agent (oauth.test.js).
func TestTSClient(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	dir := needTSClient(t)
	w := startBinWorld(t, "")
	runNodeTest(t, dir, w.env(), filepath.Join("dist", "test", "agent.test.js"), filepath.Join("dist", "test", "oauth.test.js"))
	// The suite's approval went through the agent's store: the CLI sees it.
	out := w.run(w.devHome, "review", "list", "--all")
	if !strings.Contains(out, "approved") {
		t.Errorf("roomrelay review list --all after the suite approved through the local API:\n%s", out)
	}
}

// TestTSClientProvider runs clients/ts's provider suite against an agent
// whose owner selected the app as room provider (`provider app`): the app's
// room reaches the cloud with slim answers, app_not_running while it is
// closed, an approval made while closed is installed exactly once on
// reopen, the newest provider wins, and a request past its deadline is
// canceled.
func TestTSClientProvider(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	dir := needTSClient(t)
	w := startBinWorld(t, "provider app")
	w.run(w.devHome, "enable", "--allow", "propose_room_snippet_app", "proj-a")
	restart := w.serveAgentRestart()
	runNodeTest(t, dir, append(w.env(), "ROOMRELAY_TS_APP_PROJECT=proj-a", "ROOMRELAY_TS_RESTART_URL="+restart), filepath.Join("dist", "test", "provider.test.js"))
}

// serveAgentRestart serves, on loopback, a POST that kills the agent
// (SIGKILL: its discovery file stays behind, naming a dead endpoint) and
// starts `roomrelay run` again (a new pid and boot id), for the suite's
// reconnect test; the harness keeps owning the process. It answers once the
// new agent's discovery file names a new boot id.
func (w *binWorld) serveAgentRestart() string {
	w.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		w.t.Fatal(err)
	}
	var mu sync.Mutex
	srv := &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost {
			http.Error(rw, "POST", http.StatusMethodNotAllowed)
			return
		}
		mu.Lock()
		defer mu.Unlock()
		disc := filepath.Join(w.devHome, "config", "localapi.json")
		before := bootID(disc)
		_ = w.agent.Process.Kill()
		_ = w.agent.Wait()
		w.agent, w.agentLog = w.start(w.devHome, "run", "--no-sandbox")
		for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if id := bootID(disc); id != "" && id != before {
				fmt.Fprintf(rw, "%s\n", id)
				return
			}
		}
		http.Error(rw, "the restarted agent wrote no new localapi.json within 30 s", http.StatusGatewayTimeout)
	})}
	go srv.Serve(ln)
	w.t.Cleanup(func() { srv.Close() })
	return "http://" + ln.Addr().String() + "/restart"
}

// bootID is the boot_id of a discovery file, or "".
func bootID(path string) string {
	var v struct {
		BootID string `json:"boot_id"`
	}
	b, err := os.ReadFile(path)
	if err != nil || json.Unmarshal(b, &v) != nil {
		return ""
	}
	return v.BootID
}

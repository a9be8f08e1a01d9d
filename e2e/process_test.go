package e2e

import (
	"bytes"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/relay"
)

// TestBinaryEndToEnd drives the real roomrelay binary as separate processes,
// the way a user does in two terminals: hub, pair, enroll, enable, run,
// status, hub call; then kill -9 of the agent, restart, SIGTERM, and revoke.
func TestBinaryEndToEnd(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the binary; skipped with -short")
	}
	bin := roomrelayBin(t)
	hubHome, devHome := t.TempDir(), t.TempDir()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	hubURL := "http://" + addr

	cmd := func(home string, args ...string) *exec.Cmd {
		c := exec.Command(bin, args...)
		c.Env = []string{"ROOMRELAY_HOME=" + home, "HOME=" + home, "PATH=" + os.Getenv("PATH")}
		return c
	}
	runCmd := func(home string, args ...string) (int, string) {
		t.Helper()
		var out bytes.Buffer
		c := cmd(home, args...)
		c.Stdout, c.Stderr = &out, &out
		err := c.Run()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			return ee.ExitCode(), out.String()
		}
		if err != nil {
			t.Fatalf("%v: %v", args, err)
		}
		return 0, out.String()
	}
	start := func(home string, args ...string) *exec.Cmd {
		t.Helper()
		c := cmd(home, args...)
		var logs bytes.Buffer
		c.Stdout, c.Stderr = &logs, &logs
		if err := c.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			if c.ProcessState == nil {
				c.Process.Kill()
				c.Wait()
			}
			if t.Failed() {
				t.Logf("%v output:\n%s", args, logs.String())
			}
		})
		return c
	}
	waitExit := func(c *exec.Cmd) int {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- c.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if errors.As(err, &ee) {
				return ee.ExitCode()
			}
			return 0
		case <-time.After(30 * time.Second):
			t.Fatal("process did not exit")
			return -1
		}
	}
	statusOf := func() (int, string) {
		code, out := runCmd(devHome, "status", "--json")
		var r struct{ State string }
		json.Unmarshal([]byte(out), &r)
		return code, r.State
	}

	start(hubHome, "hub", "--listen", addr, "--heartbeat", "1s")
	eventually(t, "hub up", func() bool {
		c, err := net.Dial("tcp", addr)
		if err == nil {
			c.Close()
		}
		return err == nil
	})
	code, out := runCmd(hubHome, "hub", "pair", "--project", "proj-a", "--hub", hubURL, "--json")
	var pc struct{ Code string }
	if code != 0 || json.Unmarshal([]byte(out), &pc) != nil {
		t.Fatalf("hub pair: %d %s", code, out)
	}
	if code, out := runCmd(devHome, "enroll", "--hub", hubURL, "--code", pc.Code, "--credential-store", "file"); code != 0 {
		t.Fatalf("enroll: %d %s", code, out)
	}
	if code, out := runCmd(devHome, "enroll", "--hub", hubURL, "--code", pc.Code, "--credential-store", "file"); code != 1 || !strings.Contains(out, "pairing_code_used") {
		t.Fatalf("second enroll with the same code: %d %s", code, out)
	}
	runCmd(devHome, "rooms", "create", "--project", "proj-a", "--name", "Standup", "--id", "r1")
	runCmd(devHome, "enable", "proj-a")
	if code, state := statusOf(); code != 4 || state != "not_running" {
		t.Fatalf("status before run: %d %s", code, state)
	}

	agent := start(devHome, "run", "--no-sandbox")
	eventually(t, "status online", func() bool { c, _ := statusOf(); return c == 0 })
	var cfg struct {
		DeviceID string `json:"device_id"`
	}
	b, _ := os.ReadFile(filepath.Join(devHome, "config", "config.json"))
	json.Unmarshal(b, &cfg)
	code, out = runCmd(hubHome, "hub", "call", cfg.DeviceID, "read_room", "--project", "proj-a", "--args", `{"room_id":"r1"}`, "--hub", hubURL)
	if code != 0 || !strings.Contains(out, `"kind": "local"`) {
		t.Fatalf("hub call: %d %s", code, out)
	}
	code, out = runCmd(hubHome, "hub", "call", cfg.DeviceID, "propose_room_snippet_app", "--project", "proj-a", "--args", `{}`, "--hub", hubURL)
	// The exit code is the code's in relay's table (77, EX_NOPERM), no
	// longer 1 for every failed command (#27.1).
	if code != relay.CodeCommandNotAllowed.ExitCode() || !strings.Contains(out, "command_not_allowed") {
		t.Fatalf("hub call of a command not allowed: %d %s; want exit %d", code, out, relay.CodeCommandNotAllowed.ExitCode())
	}

	// kill -9: status tells the agent is gone; a new agent takes over and
	// the audit log and store survive.
	agent.Process.Signal(syscall.SIGKILL)
	waitExit(agent)
	if code, state := statusOf(); code != 4 || state != "not_running" {
		t.Fatalf("status after kill -9: %d %s", code, state)
	}
	// The dead agent's connection is history, not a fact.
	if _, out := runCmd(devHome, "status"); strings.Contains(out, "connected:") || !strings.Contains(out, "last run:") {
		t.Fatalf("status after kill -9 still shows the dead agent's connection:\n%s", out)
	}
	agent = start(devHome, "run", "--no-sandbox")
	eventually(t, "online again", func() bool { c, _ := statusOf(); return c == 0 })
	if code, out := runCmd(devHome, "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after kill -9: %d %s", code, out)
	}

	// SIGTERM: a clean stop; the hub shows offline at once.
	agent.Process.Signal(syscall.SIGTERM)
	if code := waitExit(agent); code != 0 {
		t.Fatalf("agent exit on SIGTERM: %d", code)
	}
	code, out = runCmd(hubHome, "hub", "devices", "--json", "--hub", hubURL)
	if code != 0 || !strings.Contains(out, `"state":"offline"`) {
		t.Fatalf("hub devices after SIGTERM: %d %s", code, out)
	}

	// Revoke: the next run stops with exit 3 and says to enroll again.
	agent = start(devHome, "run", "--no-sandbox")
	eventually(t, "online for revoke", func() bool { c, _ := statusOf(); return c == 0 })
	if code, out := runCmd(hubHome, "hub", "revoke", cfg.DeviceID, "--hub", hubURL); code != 0 {
		t.Fatalf("revoke: %d %s", code, out)
	}
	if code := waitExit(agent); code != 3 {
		t.Fatalf("agent exit after revoke: %d, want 3", code)
	}
	if code, state := statusOf(); code != 3 || state != "needs_enrollment" {
		t.Fatalf("status after revoke: %d %s", code, state)
	}

	// Enrolling again with the agent stopped: status describes the new
	// identity, not the revoked one's last run.
	code, out = runCmd(hubHome, "hub", "pair", "--project", "proj-a", "--hub", hubURL, "--json")
	if code != 0 || json.Unmarshal([]byte(out), &pc) != nil {
		t.Fatalf("hub pair: %d %s", code, out)
	}
	if code, out := runCmd(devHome, "enroll", "--hub", hubURL, "--code", pc.Code, "--credential-store", "file"); code != 0 {
		t.Fatalf("enroll after revoke: %d %s", code, out)
	}
	if code, out := runCmd(devHome, "status"); code != 4 || strings.Contains(out, "refused") || strings.Contains(out, "last run:") {
		t.Fatalf("status after enrolling again (agent stopped): %d\n%s", code, out)
	}

	// Unenroll: the hub revokes the new identity; rooms and audit stay.
	b, _ = os.ReadFile(filepath.Join(devHome, "config", "config.json"))
	json.Unmarshal(b, &cfg)
	if code, out := runCmd(devHome, "unenroll"); code != 0 || !strings.Contains(out, "the hub revoked it") || !strings.Contains(out, "kept:    local rooms") {
		t.Fatalf("unenroll: %d %s", code, out)
	}
	code, out = runCmd(hubHome, "hub", "devices", "--json", "--hub", hubURL)
	var list struct {
		Devices []struct {
			ID      string
			Revoked bool
		}
	}
	if code != 0 || json.Unmarshal([]byte(out), &list) != nil {
		t.Fatalf("hub devices after unenroll: %d %s", code, out)
	}
	revoked := map[string]bool{}
	for _, d := range list.Devices {
		revoked[d.ID] = d.Revoked
	}
	if r, ok := revoked[cfg.DeviceID]; !ok || !r {
		t.Fatalf("device %s after unenroll: listed %v, revoked %v (%s)", cfg.DeviceID, ok, r, out)
	}
	if code, out := runCmd(devHome, "audit", "verify"); code != 0 {
		t.Fatalf("audit verify after unenroll: %d %s", code, out)
	}

}

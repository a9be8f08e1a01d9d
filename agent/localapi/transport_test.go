//go:build unix

package localapi

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"testing"
)

func TestListenReplacesAStaleSocket(t *testing.T) {
	cfg := ListenConfig{StateDir: t.TempDir()}
	ln, ep, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// A live listener: the second agent refuses.
	if _, _, err := Listen(cfg); !errors.Is(err, ErrInUse) {
		t.Fatalf("second Listen while the first answers: %v", err)
	}
	// A socket left by a killed agent: nobody answers, so it is replaced.
	ln.(*net.UnixListener).SetUnlinkOnClose(false)
	ln.Close()
	if _, err := os.Stat(ep.Path); err != nil {
		t.Fatalf("stale socket should still be there: %v", err)
	}
	ln2, _, err := Listen(cfg)
	if err != nil {
		t.Fatalf("Listen over a stale socket: %v", err)
	}
	ln2.Close()
}

func TestListenRefusesWhatIsNotOurs(t *testing.T) {
	dir := t.TempDir()
	cfg := ListenConfig{StateDir: dir}
	if err := os.WriteFile(filepath.Join(dir, SocketName), []byte("x"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Listen(cfg); err == nil || !strings.Contains(err.Error(), "not a socket") {
		t.Fatalf("a file at the socket path: %v", err)
	}
	if os.Getuid() != 0 {
		return
	}
	other := filepath.Join(t.TempDir(), "run")
	os.Mkdir(other, 0o700)
	os.Chown(other, 65534, 65534)
	if _, _, err := Listen(ListenConfig{RuntimeDir: other}); err == nil || !strings.Contains(err.Error(), "not this user's alone") {
		t.Fatalf("a runtime dir of another user: %v", err)
	}
}

func TestRuntimeDirAndLongPathFallback(t *testing.T) {
	rt := t.TempDir()
	path, note := SocketPath(ListenConfig{RuntimeDir: rt, StateDir: "/nonexistent"})
	if path != filepath.Join(rt, "roomrelay", SocketName) || note != "" {
		t.Fatalf("runtime dir path %q %q", path, note)
	}
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 150))
	tmp := t.TempDir()
	cfg := ListenConfig{StateDir: deep, TempDir: tmp}
	ln, ep, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !strings.HasPrefix(ep.Path, tmp) || ep.Note == "" || len(ep.Path) > maxSocketPath {
		t.Fatalf("long path fallback: %+v", ep)
	}
	c, err := net.Dial("unix", ep.Path)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
}

// TestOtherUserRefused runs a client as uid 65534: with the socket as
// Listen made it, it cannot connect; with the directory and socket opened
// up (as a misconfigured system might), the peer check refuses it and the
// audit line names uid 65534.
func TestOtherUserRefused(t *testing.T) {
	if runtime.GOOS != "linux" || os.Getuid() != 0 {
		t.Skip("needs root on Linux to run a client as another user")
	}
	ta := startAPI(t, nil)
	bin := peerBinary(t)
	run := func() string {
		cmd := exec.Command(bin)
		cmd.Env = []string{"RR_LOCALAPI_PEER_SOCKET=" + ta.srv.Endpoint().Path}
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("client as uid 65534: %v: %s", err, out)
		}
		return string(out)
	}
	if out := run(); !strings.Contains(out, "dial:") || !strings.Contains(out, "permission denied") {
		t.Fatalf("other user with the socket 0600 in a 0700 dir: %s", out)
	}
	sock := ta.srv.Endpoint().Path
	for p := filepath.Dir(sock); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		os.Chmod(p, 0o755)
	}
	os.Chmod(sock, 0o666)
	out := run()
	if !strings.Contains(out, "status 403") || !strings.Contains(out, CodeForbidden) {
		t.Fatalf("other user with the socket opened up: %s", out)
	}
	lines := ta.auditLines("localapi.refused")
	if len(lines) != 1 || !strings.Contains(lines[0].Detail, "uid=65534") {
		t.Fatalf("audit lines: %+v", lines)
	}
}

// peerBinary copies the test binary where uid 65534 can run it.
func peerBinary(t *testing.T) string {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "rr-peer-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	b, err := os.ReadFile(self)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "peer")
	if err := os.WriteFile(bin, b, 0o755); err != nil {
		t.Fatal(err)
	}
	return bin
}

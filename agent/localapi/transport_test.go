//go:build unix

package localapi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

func TestListenReplacesAStaleSocket(t *testing.T) {
	t.Parallel()
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
	t.Parallel()
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
	t.Parallel()
	rt := t.TempDir()
	path, note, err := SocketPath(ListenConfig{RuntimeDir: rt, StateDir: "/nonexistent"})
	if err != nil || path != filepath.Join(rt, "roomrelay", SocketName) || note != "" {
		t.Fatalf("runtime dir path %q %q %v", path, note, err)
	}
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 150))
	short := t.TempDir()
	cfg := ListenConfig{StateDir: deep, ShortDir: short}
	ln, ep, err := Listen(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	if !strings.HasPrefix(ep.Path, short) || ep.Note == "" || len(ep.Path) > maxSocketPath {
		t.Fatalf("long path fallback: %+v", ep)
	}
	c, err := dialEndpoint(context.Background(), ep)
	if err != nil {
		t.Fatal(err)
	}
	c.Close()
	// No short directory, or one too long itself: refused, saying what to do.
	for _, sd := range []string{"", filepath.Join(short, strings.Repeat("s", 100))} {
		if _, _, err := Listen(ListenConfig{StateDir: deep, ShortDir: sd}); err == nil || !strings.Contains(err.Error(), "set XDG_RUNTIME_DIR or use a shorter --home") {
			t.Fatalf("long path with short dir %q: %v", sd, err)
		}
	}
}

// TestLongPathNeverUsesASharedDir: when the socket's path is too long, it
// goes below the user's own short directory, never below the temp dir,
// where another user who created roomrelay-<uid> first made the agent
// refuse to start and a stale discovery file point at their socket
// (#29.5). With the old fallback (os.TempDir()/roomrelay-<uid>) restored
// this fails: "owned by another user".
func TestLongPathNeverUsesASharedDir(t *testing.T) {
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory another user's")
	}
	tmp := t.TempDir()
	os.Chmod(tmp, 0o777|os.ModeSticky)
	squat := filepath.Join(tmp, "roomrelay-"+strconv.Itoa(os.Getuid()))
	if err := os.Mkdir(squat, 0o755); err != nil {
		t.Fatal(err)
	}
	os.Chown(squat, 65534, 65534)
	t.Setenv("TMPDIR", tmp)
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 150))
	short := t.TempDir()
	ln, ep, err := Listen(ListenConfig{StateDir: deep, ShortDir: short})
	if err != nil {
		t.Fatalf("long path with another user's roomrelay-<uid> in the temp dir: %v", err)
	}
	ln.Close()
	if !strings.HasPrefix(ep.Path, short+"/") {
		t.Fatalf("socket at %s, want below %s", ep.Path, short)
	}
}

// TestSocketRefusedBelowAnotherUsersDir: every directory above the socket
// is checked, wherever the socket goes: one of another user's, or one
// others may write without the sticky bit, is refused, naming it (#29.5).
func TestSocketRefusedBelowAnotherUsersDir(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a directory another user's")
	}
	theirs := filepath.Join(t.TempDir(), "theirs")
	os.Mkdir(theirs, 0o755)
	os.Chown(theirs, 65534, 65534)
	open := filepath.Join(t.TempDir(), "open")
	os.Mkdir(open, 0o777)
	os.Chmod(open, 0o777)
	sticky := filepath.Join(t.TempDir(), "sticky")
	os.Mkdir(sticky, 0o777)
	os.Chmod(sticky, 0o777|os.ModeSticky)
	deep := filepath.Join(t.TempDir(), strings.Repeat("d", 150))
	for _, c := range []struct {
		name string
		cfg  ListenConfig
		want string
	}{
		{"state dir below another user's", ListenConfig{StateDir: filepath.Join(theirs, "state")}, "belongs to uid 65534"},
		{"short dir another user's", ListenConfig{StateDir: deep, ShortDir: theirs}, "belongs to uid 65534"},
		{"state dir below a dir anyone may write", ListenConfig{StateDir: filepath.Join(open, "state")}, "writable by others"},
		{"below a sticky dir", ListenConfig{StateDir: filepath.Join(sticky, "state")}, ""},
	} {
		ln, _, err := Listen(c.cfg)
		if c.want == "" {
			if err != nil {
				t.Errorf("%s: %v", c.name, err)
			} else {
				ln.Close()
			}
			continue
		}
		if err == nil {
			ln.Close()
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

// TestClientRefusesAnotherUsersEndpoint: a discovery file pointing at a
// socket another user listens on (a stale localapi.json and a squatted
// directory) is never spoken to: the socket file is theirs; with the file
// made ours, the process answering is theirs; a discovery file that is not
// ours is not read. Each says whose it is (#29.5: `roomrelay disable`
// printed "disabled" to the other user's socket).
func TestClientRefusesAnotherUsersEndpoint(t *testing.T) {
	t.Parallel()
	if runtime.GOOS != "linux" || os.Getuid() != 0 {
		t.Skip("needs root on Linux to run a server as another user")
	}
	dir, err := os.MkdirTemp("", "rr-squat-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o777)
	sock := filepath.Join(dir, SocketName)
	cmd := exec.Command(peerBinary(t))
	cmd.Env = []string{"RR_LOCALAPI_PEER_LISTEN=" + sock}
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
	// Listening, not only bound: the file appears at bind, and a connect
	// before the peer's listen is refused (seen under -race in CI).
	testutil.Eventually(t, "the other user's socket accepting", func() bool {
		c, err := net.Dial("unix", sock)
		if err == nil {
			c.Close()
		}
		return err == nil
	})

	cfgDir := t.TempDir()
	if err := WriteDiscovery(cfgDir, Discovery{Transport: TransportUnix, Path: sock}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, _, err := Discover(ctx, cfgDir); !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "the socket "+sock+" belongs to uid 65534") {
		t.Fatalf("their socket: %v", err)
	}
	if err := os.Chown(sock, 0, 0); err != nil {
		t.Fatal(err)
	}
	if _, _, err := Discover(ctx, cfgDir); !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "runs as uid 65534") {
		t.Fatalf("their process on a socket file of ours: %v", err)
	}
	if c, err := Dial(ctx, Endpoint{Transport: TransportUnix, Path: sock}); err == nil || !errors.Is(err, ErrNotOwned) {
		if c != nil {
			c.Close()
		}
		t.Fatalf("Dial (the provider's websocket) to their process: %v", err)
	}
	os.Chown(filepath.Join(cfgDir, DiscoveryFile), 65534, 65534)
	if _, _, err := Discover(ctx, cfgDir); !errors.Is(err, ErrNotOwned) || !strings.Contains(err.Error(), "the discovery file") {
		t.Fatalf("their discovery file: %v", err)
	}
}

// TestOtherUserRefused runs a client as uid 65534: with the socket as
// Listen made it, it cannot connect; with the directory and socket opened
// up (as a misconfigured system might), the peer check refuses it and the
// audit line names uid 65534.
func TestOtherUserRefused(t *testing.T) {
	t.Parallel()
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

// TestClientChecksWhoseTheEndpointIs: the client (CLI, Go apps) checks
// that the discovery file, the socket and the process answering on it are
// its own user's before it speaks; seen as another uid (the ownUID seam,
// so it runs without root), the agent's own endpoint is refused, naming
// whose it is (#29.5). TestClientRefusesAnotherUsersEndpoint does it with
// a real process of another user where the tests run as root.
func TestClientChecksWhoseTheEndpointIs(t *testing.T) {
	ta := startAPI(t, nil)
	ctx := context.Background()
	testutil.Eventually(t, "the own agent discovered", func() bool { _, _, err := Discover(ctx, ta.cfg.ConfigDir); return err == nil })
	me := os.Getuid()
	ownUID = func() int { return me + 1 }
	t.Cleanup(func() { ownUID = os.Getuid })
	_, _, err := Discover(ctx, ta.cfg.ConfigDir)
	if !errors.Is(err, ErrNotOwned) || errors.Is(err, ErrNotRunning) || !strings.Contains(err.Error(), fmt.Sprintf("belongs to uid %d, not to you (uid %d)", me, me+1)) {
		t.Fatalf("seen as another user: %v", err)
	}
	if _, err := dialEndpoint(ctx, ta.srv.Endpoint()); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("dial seen as another user: %v", err)
	}
}

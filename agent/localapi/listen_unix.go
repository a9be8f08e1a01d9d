//go:build unix

package localapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ErrInUse: another process answers on the endpoint.
var ErrInUse = errors.New("local api: the endpoint is in use by another process")

// maxSocketPath is the longest path a socket address holds (104 bytes on
// macOS, 108 on Linux, with the terminating NUL).
var maxSocketPath = len(unix.RawSockaddrUnix{}.Path) - 1

// SocketPath is where Listen puts the socket for cfg, and a note when it is
// the short fallback.
func SocketPath(cfg ListenConfig) (path, note string) {
	dir := cfg.StateDir
	if cfg.RuntimeDir != "" {
		dir = filepath.Join(cfg.RuntimeDir, "roomrelay")
	}
	path = filepath.Join(dir, SocketName)
	if len(path) <= maxSocketPath {
		return path, ""
	}
	tmp := cfg.TempDir
	if tmp == "" {
		tmp = os.TempDir()
	}
	// Named by the long path's hash: agents of one user with different
	// homes each get their own.
	sum := sha256.Sum256([]byte(path))
	short := filepath.Join(tmp, "roomrelay-"+strconv.Itoa(os.Getuid()), hex.EncodeToString(sum[:6])+".sock")
	return short, fmt.Sprintf("%s is longer than a socket address holds (%d bytes); using %s", path, maxSocketPath, short)
}

// Listen opens the unix socket: its directory is created 0700 and must be
// owned by this user (a directory someone else made is refused, never
// used), a stale socket of ours that nobody answers on is replaced, and the
// socket is made 0600.
func Listen(cfg ListenConfig) (net.Listener, Endpoint, error) {
	path, note := SocketPath(cfg)
	if cfg.RuntimeDir != "" && note == "" {
		if err := ownedParent(cfg.RuntimeDir); err != nil {
			return nil, Endpoint{}, err
		}
	}
	if err := privateDir(filepath.Dir(path)); err != nil {
		return nil, Endpoint{}, err
	}
	if err := clearStale(path); err != nil {
		return nil, Endpoint{}, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, Endpoint{}, fmt.Errorf("local api: listen on %s: %w", path, err)
	}
	// The directory already keeps others out; the mode says so twice.
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, Endpoint{}, fmt.Errorf("local api: %w", err)
	}
	return ln, Endpoint{Transport: TransportUnix, Path: path, Note: note}, nil
}

// privateDir creates dir 0700 if missing and checks it is a directory (not
// a link) owned by this user that nobody else can enter; one of ours with
// looser bits is tightened.
func privateDir(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local api: create %s: %w", dir, err)
	}
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("local api: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("local api: %s is not a directory (a link or a file is never used for the socket)", dir)
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("local api: %s is owned by another user; refusing to put the socket there (remove it)", dir)
	case fi.Mode().Perm()&0o077 != 0:
		if err := os.Chmod(dir, 0o700); err != nil {
			return fmt.Errorf("local api: %w", err)
		}
	}
	return nil
}

// ownedParent checks the runtime dir: another user who owns it, or can
// write to it, could replace the directory the socket lives in.
func ownedParent(dir string) error {
	fi, err := os.Stat(dir)
	if err != nil {
		return fmt.Errorf("local api: runtime dir: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok || int(st.Uid) != os.Getuid() || fi.Mode().Perm()&0o022 != 0 {
		return fmt.Errorf("local api: runtime dir %s is not this user's alone (owner or mode %04o); refusing to put the socket there", dir, fi.Mode().Perm())
	}
	return nil
}

// clearStale removes a socket of ours left by an agent that died, once a
// dial shows nobody answers; anything else at the path is refused.
func clearStale(path string) error {
	fi, err := os.Lstat(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("local api: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if fi.Mode().Type() != fs.ModeSocket || !ok || int(st.Uid) != os.Getuid() {
		return fmt.Errorf("local api: %s exists and is not a socket of this user; refusing to replace it", path)
	}
	d := net.Dialer{Timeout: time.Second}
	if c, err := d.DialContext(context.Background(), "unix", path); err == nil {
		c.Close()
		return fmt.Errorf("%w (%s)", ErrInUse, path)
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("local api: remove stale socket: %w", err)
	}
	return nil
}

// PeerOf identifies the process at the other end of a unix socket
// connection.
func PeerOf(c net.Conn) (Peer, error) {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return Peer{}, fmt.Errorf("local api: peer check: not a unix socket (%T)", c)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return Peer{}, fmt.Errorf("local api: peer check: %w", err)
	}
	var p Peer
	var perr error
	if err := raw.Control(func(fd uintptr) { p, perr = peerCred(int(fd)) }); err != nil {
		return Peer{}, fmt.Errorf("local api: peer check: %w", err)
	}
	if perr != nil {
		return Peer{}, fmt.Errorf("local api: peer check: %w", perr)
	}
	p.Owner = p.UID == os.Getuid()
	return p, nil
}

// dialEndpoint connects to a unix socket endpoint.
func dialEndpoint(ctx context.Context, e Endpoint) (net.Conn, error) {
	if e.Transport != TransportUnix {
		return nil, fmt.Errorf("local api: transport %q is not served on this OS", e.Transport)
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", e.Path)
}

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
	"strings"
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
// the short fallback: $XDG_RUNTIME_DIR/roomrelay or the state dir, else,
// when that path does not fit a socket address, a directory named by its
// hash under cfg.ShortDir (the user's runtime dir or home, never a shared
// directory). An error when neither fits.
func SocketPath(cfg ListenConfig) (path, note string, err error) {
	dir := cfg.StateDir
	if cfg.RuntimeDir != "" {
		dir = filepath.Join(cfg.RuntimeDir, "roomrelay")
	}
	path = filepath.Join(dir, SocketName)
	if len(path) <= maxSocketPath {
		return path, "", nil
	}
	// Named by the long path's hash: agents of one user with different
	// homes each get their own.
	sum := sha256.Sum256([]byte(path))
	short := ""
	if cfg.ShortDir != "" {
		short = filepath.Join(cfg.ShortDir, ".roomrelay-"+hex.EncodeToString(sum[:6]), SocketName)
	}
	if short == "" || len(short) > maxSocketPath {
		return "", "", fmt.Errorf("local api: %s is longer than a socket address holds (%d bytes) and there is no short directory of this user's that fits (%q); set XDG_RUNTIME_DIR or use a shorter --home", path, maxSocketPath, short)
	}
	return short, fmt.Sprintf("%s is longer than a socket address holds (%d bytes); using %s", path, maxSocketPath, short), nil
}

// Listen opens the unix socket: every directory above it must belong to
// this user or root and be writable by nobody else unless sticky
// (safeAncestors), its own directory is created 0700 and must be this
// user's (a directory someone else made is refused, never used), a stale
// socket of ours that nobody answers on is replaced, and the socket is
// made 0600.
func Listen(cfg ListenConfig) (net.Listener, Endpoint, error) {
	path, note, err := SocketPath(cfg)
	if err != nil {
		return nil, Endpoint{}, err
	}
	if cfg.RuntimeDir != "" && strings.HasPrefix(path, cfg.RuntimeDir+string(filepath.Separator)) {
		if err := ownedParent(cfg.RuntimeDir); err != nil {
			return nil, Endpoint{}, err
		}
	}
	if err := safeAncestors(filepath.Dir(path)); err != nil {
		return nil, Endpoint{}, err
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

// safeAncestors checks every existing directory above dir (dir itself is
// privateDir's): each must belong to this user or root, and one writable by
// group or others must be sticky (like /tmp), so nobody else can replace or
// rename what lies below it. A directory that does not exist yet is
// created by this user.
func safeAncestors(dir string) error {
	for p := filepath.Dir(filepath.Clean(dir)); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		switch {
		case errors.Is(err, fs.ErrNotExist):
		case err != nil:
			return fmt.Errorf("local api: %w", err)
		default:
			st, ok := fi.Sys().(*syscall.Stat_t)
			if !ok || (int(st.Uid) != os.Getuid() && st.Uid != 0) {
				uid := -1
				if ok {
					uid = int(st.Uid)
				}
				return fmt.Errorf("local api: %s, above the socket, belongs to uid %d, not to this user (uid %d) or root; refusing to put the socket below it", p, uid, os.Getuid())
			}
			if fi.Mode().Perm()&0o022 != 0 && fi.Mode()&fs.ModeSticky == 0 {
				return fmt.Errorf("local api: %s, above the socket, is writable by others (mode %04o, not sticky); refusing to put the socket below it", p, fi.Mode().Perm())
			}
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
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

// ownUID is this process's uid as the client's checks see it (a variable
// for tests; the server's own checks use os.Getuid).
var ownUID = os.Getuid

// notOwned says whose path is and that the client will not speak to it.
func notOwned(what, path string, uid int) error {
	return fmt.Errorf("%w: %s %s belongs to uid %d, not to you (uid %d); not speaking to it (another user may have put it there, or an agent of theirs left it)",
		ErrNotOwned, what, path, uid, ownUID())
}

// checkDiscoveryFile refuses a discovery file that is not this user's
// regular file, or that others may write.
func checkDiscoveryFile(path string) error {
	fi, err := os.Lstat(path)
	if err != nil {
		return fmt.Errorf("local api: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !ok || int(st.Uid) != ownUID():
		uid := -1
		if ok {
			uid = int(st.Uid)
		}
		return notOwned("the discovery file", path, uid)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: the discovery file %s is not a regular file (a link is never followed)", ErrNotOwned, path)
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("%w: the discovery file %s is writable by others (mode %04o); not trusting it", ErrNotOwned, path, fi.Mode().Perm())
	}
	return nil
}

// dialEndpoint connects to a unix socket endpoint that is this user's: the
// socket file must belong to this user, and so must the process that
// answers on it (its peer credentials), so a socket another user put where
// a stale discovery file points is never spoken to.
func dialEndpoint(ctx context.Context, e Endpoint) (net.Conn, error) {
	if e.Transport != TransportUnix {
		return nil, fmt.Errorf("local api: transport %q is not served on this OS", e.Transport)
	}
	if fi, err := os.Lstat(e.Path); err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != ownUID() {
			uid := -1
			if ok {
				uid = int(st.Uid)
			}
			return nil, notOwned("the socket", e.Path, uid)
		}
	}
	var d net.Dialer
	c, err := d.DialContext(ctx, "unix", e.Path)
	if err != nil {
		return nil, err
	}
	p, err := PeerOf(c)
	if err != nil {
		c.Close()
		return nil, fmt.Errorf("local api: who answers on %s: %w", e.Path, err)
	}
	if p.UID != ownUID() {
		c.Close()
		return nil, fmt.Errorf("%w: the process answering on %s (pid %d) runs as uid %d, not as you (uid %d); not speaking to it", ErrNotOwned, e.Path, p.PID, p.UID, ownUID())
	}
	return c, nil
}

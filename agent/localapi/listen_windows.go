package localapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"strings"

	"golang.org/x/sys/windows"
)

// ErrInUse: the pipe name is taken (another agent, or a process squatting
// on it).
var ErrInUse = errors.New("local api: the pipe name is in use by another process")

// userSID is this process's user, as a string SID.
func userSID() (string, error) {
	u, err := windows.GetCurrentProcessToken().GetTokenUser()
	if err != nil {
		return "", fmt.Errorf("local api: current user: %w", err)
	}
	return u.User.Sid.String(), nil
}

// PipeName is the pipe for cfg: \\.\pipe\roomrelay-<SID>-localapi, with a
// short hash of the state dir when the agent runs below --home (RuntimeDir
// is then ""), so test and demo agents of one user do not collide.
func PipeName(cfg ListenConfig) (string, error) {
	sid, err := userSID()
	if err != nil {
		return "", err
	}
	name := `\\.\pipe\roomrelay-` + sid + `-localapi`
	if cfg.RuntimeDir == "" && cfg.StateDir != "" {
		sum := sha256.Sum256([]byte(strings.ToLower(filepath.Clean(cfg.StateDir))))
		name += "-" + hex.EncodeToString(sum[:4])
	}
	return name, nil
}

// Listen creates the named pipe with an owner-only security descriptor
// (the user and SYSTEM; remote clients are rejected). The first instance is
// created with FILE_FLAG_FIRST_PIPE_INSTANCE, so a name that another
// process already holds fails here: the agent refuses to start rather than
// share the name with a squatter.
func Listen(cfg ListenConfig) (net.Listener, Endpoint, error) {
	sid, err := userSID()
	if err != nil {
		return nil, Endpoint{}, err
	}
	name, err := PipeName(cfg)
	if err != nil {
		return nil, Endpoint{}, err
	}
	sddl := fmt.Sprintf("O:%sG:%sD:P(A;;GA;;;%s)(A;;GA;;;SY)", sid, sid, sid)
	ln, err := listenPipe(name, sddl)
	if errors.Is(err, windows.ERROR_ACCESS_DENIED) || errors.Is(err, windows.ERROR_PIPE_BUSY) {
		return nil, Endpoint{}, fmt.Errorf("%w (%s): another roomrelay agent runs, or another process took the name", ErrInUse, name)
	}
	if err != nil {
		return nil, Endpoint{}, fmt.Errorf("local api: listen on %s: %w", name, err)
	}
	return ln, Endpoint{Transport: TransportNpipe, Path: name}, nil
}

// PeerOf identifies the pipe's client: its process id from the pipe, then
// that process's token user. A client whose process cannot be opened is
// refused (its Peer is not the owner).
func PeerOf(c net.Conn) (Peer, error) {
	for {
		u, ok := c.(interface{ Unwrap() net.Conn })
		if !ok {
			break
		}
		c = u.Unwrap()
	}
	pc, ok := c.(*pipeConn)
	if !ok {
		return Peer{UID: -1}, fmt.Errorf("local api: peer check: not a pipe (%T)", c)
	}
	var pid uint32
	if err := windows.GetNamedPipeClientProcessId(pc.h, &pid); err != nil {
		return Peer{UID: -1}, fmt.Errorf("local api: peer check: client pid: %w", err)
	}
	p := Peer{UID: -1, PID: int(pid)}
	sid, err := processSID(pid)
	if err != nil {
		return p, fmt.Errorf("local api: peer check: client process %d: %w", pid, err)
	}
	p.SID = sid
	if h, err := windows.OpenProcess(windows.PROCESS_QUERY_LIMITED_INFORMATION, false, pid); err == nil {
		buf := make([]uint16, windows.MAX_LONG_PATH)
		n := uint32(len(buf))
		if windows.QueryFullProcessImageName(h, 0, &buf[0], &n) == nil {
			p.Exe = windows.UTF16ToString(buf[:n])
		}
		windows.CloseHandle(h)
	}
	own, err := userSID()
	if err != nil {
		return p, err
	}
	p.Owner = p.SID == own
	return p, nil
}

// dialEndpoint connects to a named pipe endpoint.
func dialEndpoint(ctx context.Context, e Endpoint) (net.Conn, error) {
	if e.Transport != TransportNpipe {
		return nil, fmt.Errorf("local api: transport %q is not served on this OS", e.Transport)
	}
	return dialPipe(ctx, e.Path)
}

// checkDiscoveryFile has nothing to check on Windows: the discovery file
// lives in the user's own %APPDATA% (no other user can create or replace
// it), and the pipe it names carries the user's SID, is created
// first-instance with an owner-only security descriptor, and is checked by
// the agent's own peer check; docs/localapi.md says so.
func checkDiscoveryFile(string) error { return nil }

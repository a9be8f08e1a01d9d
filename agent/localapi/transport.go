package localapi

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
)

// Transports named in Endpoint and the discovery file.
const (
	TransportUnix  = "unix"
	TransportNpipe = "npipe"
)

// SocketName is the unix socket's file name in its directory.
const SocketName = "localapi.sock"

// DiscoveryFile is the discovery file's name in the config dir.
const DiscoveryFile = "localapi.json"

// ListenConfig says where Listen puts the endpoint.
type ListenConfig struct {
	// RuntimeDir is the user's runtime dir ($XDG_RUNTIME_DIR), or "" when
	// there is none or the agent runs below --home: the socket then lives in
	// StateDir. Ignored on Windows.
	RuntimeDir string
	// StateDir is the agent's state dir, the fallback for the socket.
	StateDir string
	// ShortDir is a short directory of the user's own (the CLI passes
	// $XDG_RUNTIME_DIR when set, else the user's home) under which the
	// socket goes, in a hashed subdirectory, when the usual path would not
	// fit a socket address; "" refuses such a path. Never a shared
	// directory such as /tmp: another user could create the subdirectory
	// first.
	ShortDir string
}

// ErrNotOwned: the discovery file, the socket, or the process answering on
// it belongs to another user; a client never speaks to it.
var ErrNotOwned = errors.New("local api: not this user's")

// Endpoint is where the local API listens.
type Endpoint struct {
	Transport string `json:"transport"` // TransportUnix or TransportNpipe
	Path      string `json:"path"`      // the socket's path or the pipe's name
	// Note says why the endpoint is not where the docs say it usually is
	// (the short path fallback), for the log.
	Note string `json:"-"`
}

// Dial connects to the endpoint (a unix socket, or the named pipe on
// Windows), for a client that speaks something other than Client's JSON
// calls, such as the room provider's websocket.
func Dial(ctx context.Context, e Endpoint) (net.Conn, error) { return dialEndpoint(ctx, e) }

// Peer is the process at the other end of a connection.
type Peer struct {
	UID int    `json:"uid"` // -1 on Windows
	PID int    `json:"pid"` // 0 when the OS did not say
	SID string `json:"sid,omitempty"`
	// Exe is the peer's executable, where the OS tells it (Linux, Windows);
	// for the audit line only, never for a decision.
	Exe string `json:"exe,omitempty"`
	// Owner is whether the peer runs as the agent's own user.
	Owner bool `json:"-"`
}

// Discovery is the content of localapi.json.
type Discovery struct {
	Transport string `json:"transport"`
	Path      string `json:"path"`
	PID       int    `json:"pid"`
	BootID    string `json:"boot_id"`
	API       string `json:"api"`
	Version   string `json:"version"`
}

// WriteDiscovery writes localapi.json into dir (0600, atomically).
func WriteDiscovery(dir string, d Discovery) error {
	b, err := json.MarshalIndent(d, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("local api: discovery file: %w", err)
	}
	f, err := os.CreateTemp(dir, "."+DiscoveryFile+".*")
	if err != nil {
		return fmt.Errorf("local api: discovery file: %w", err)
	}
	defer os.Remove(f.Name())
	if err = f.Chmod(0o600); err == nil {
		_, err = f.Write(append(b, '\n'))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, DiscoveryFile))
	}
	if err != nil {
		return fmt.Errorf("local api: discovery file: %w", err)
	}
	return nil
}

// ReadDiscovery reads localapi.json from dir. On Unix the file must be
// this user's and writable by nobody else (ErrNotOwned otherwise).
func ReadDiscovery(dir string) (Discovery, error) {
	var d Discovery
	path := filepath.Join(dir, DiscoveryFile)
	if err := checkDiscoveryFile(path); err != nil {
		return d, err
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return d, fmt.Errorf("local api: %w", err)
	}
	if err := json.Unmarshal(b, &d); err != nil {
		return d, fmt.Errorf("local api: %s is corrupt: %w", DiscoveryFile, err)
	}
	return d, nil
}

// removeDiscovery removes localapi.json if it still names this boot (a
// newer agent may have replaced it).
func removeDiscovery(dir, bootID string) {
	d, err := ReadDiscovery(dir)
	if errors.Is(err, fs.ErrNotExist) || (err == nil && d.BootID != bootID) {
		return
	}
	os.Remove(filepath.Join(dir, DiscoveryFile))
}

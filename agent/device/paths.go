// Package device holds the device's workflows outside the running agent:
// where its files live (Paths), its identity (Config, config.json),
// enrolling with a hub and leaving it (Enroll, Unenroll), and what is
// wrong with the agent right now (Diagnose). The CLI, the tests and a
// desktop-app integration call the same code; the CLI only parses flags,
// prints, and maps an Error's Kind to an exit code.
package device

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"

	"github.com/roomrelay/roomrelay/internal/replace"
)

// Paths are the three directories roomrelay uses on a device.
type Paths struct {
	Config string // config.json, the policy file, the file credential store
	State  string // status.json, dedupe store, audit log: may be deleted and rebuilt
	Data   string // local Rooms database, hub data dir when this machine runs a hub
	// Runtime is the user's runtime dir ($XDG_RUNTIME_DIR), where the local
	// API's socket goes; "" below --home (the socket is then in State) or
	// when there is none.
	Runtime string
}

// ResolvePaths returns the directories: all three below home when it is
// set (tests, the demo, --home and ROOMRELAY_HOME), else the user's
// config dir and, on Linux and FreeBSD, the XDG state and data dirs.
// getenv reads XDG_STATE_HOME and XDG_DATA_HOME.
func ResolvePaths(home string, getenv func(string) string) (Paths, error) {
	if home != "" {
		abs, err := filepath.Abs(home)
		if err != nil {
			return Paths{}, fmt.Errorf("--home: %w", err)
		}
		return Paths{Config: filepath.Join(abs, "config"), State: filepath.Join(abs, "state"), Data: filepath.Join(abs, "data")}, nil
	}
	cfg, err := os.UserConfigDir()
	if err != nil {
		return Paths{}, fmt.Errorf("no config directory (set --home or ROOMRELAY_HOME): %w", err)
	}
	p := Paths{Config: filepath.Join(cfg, "roomrelay")}
	if runtime.GOOS == "linux" || runtime.GOOS == "freebsd" {
		userHome, err := os.UserHomeDir()
		if err != nil {
			return Paths{}, fmt.Errorf("no home directory (set --home or ROOMRELAY_HOME): %w", err)
		}
		p.State = filepath.Join(xdg(getenv, "XDG_STATE_HOME", filepath.Join(userHome, ".local", "state")), "roomrelay")
		p.Runtime = xdg(getenv, "XDG_RUNTIME_DIR", "")
		p.Data = filepath.Join(xdg(getenv, "XDG_DATA_HOME", filepath.Join(userHome, ".local", "share")), "roomrelay")
	} else {
		p.State = filepath.Join(p.Config, "state")
		p.Data = filepath.Join(p.Config, "data")
	}
	return p, nil
}

// xdg is an XDG base directory variable, or def when it is unset or not
// absolute (the spec says to ignore a relative one).
func xdg(getenv func(string) string, key, def string) string {
	if v := getenv(key); filepath.IsAbs(v) {
		return v
	}
	return def
}

// MkdirAll creates the three directories, private to the user.
func (p Paths) MkdirAll() error {
	for _, d := range []string{p.Config, p.State, p.Data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// writeFileAtomic replaces path with data so a reader never sees half a file.
func writeFileAtomic(path string, data []byte, perm os.FileMode) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create %s: %w", filepath.Dir(path), err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(data); err == nil {
		err = tmp.Chmod(perm)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := replace.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

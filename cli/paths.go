package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/roomrelay/roomrelay/agent/credstore"
)

// devicePaths are the three directories roomrelay uses on a device.
type devicePaths struct {
	Config string // config.json, the policy file, the file credential store
	State  string // status.json, dedupe store, audit log: may be deleted and rebuilt
	Data   string // local Rooms database, hub data dir when this machine runs a hub
}

// pathFlags adds --home to a command. With --home DIR (or ROOMRELAY_HOME) all
// three directories live below DIR, which is what tests and the demo use.
func pathFlags(fs *flag.FlagSet, e *Env) func() (devicePaths, error) {
	home := fs.String("home", e.Getenv("ROOMRELAY_HOME"), "keep config, state and data below this `dir` (env ROOMRELAY_HOME)")
	return func() (devicePaths, error) { return resolvePaths(*home, e.Getenv) }
}

func resolvePaths(home string, getenv func(string) string) (devicePaths, error) {
	if home != "" {
		abs, err := filepath.Abs(home)
		if err != nil {
			return devicePaths{}, fmt.Errorf("--home: %w", err)
		}
		return devicePaths{Config: filepath.Join(abs, "config"), State: filepath.Join(abs, "state"), Data: filepath.Join(abs, "data")}, nil
	}
	cfg, err := os.UserConfigDir()
	if err != nil {
		return devicePaths{}, fmt.Errorf("no config directory (set --home or ROOMRELAY_HOME): %w", err)
	}
	p := devicePaths{Config: filepath.Join(cfg, "roomrelay")}
	if runtime.GOOS == "linux" || runtime.GOOS == "freebsd" {
		userHome, err := os.UserHomeDir()
		if err != nil {
			return devicePaths{}, fmt.Errorf("no home directory (set --home or ROOMRELAY_HOME): %w", err)
		}
		p.State = filepath.Join(xdg(getenv, "XDG_STATE_HOME", filepath.Join(userHome, ".local", "state")), "roomrelay")
		p.Data = filepath.Join(xdg(getenv, "XDG_DATA_HOME", filepath.Join(userHome, ".local", "share")), "roomrelay")
	} else {
		p.State = filepath.Join(p.Config, "state")
		p.Data = filepath.Join(p.Config, "data")
	}
	return p, nil
}

func xdg(getenv func(string) string, key, def string) string {
	if v := getenv(key); filepath.IsAbs(v) {
		return v
	}
	return def
}

// MkdirAll creates the three directories, private to the user.
func (p devicePaths) MkdirAll() error {
	for _, d := range []string{p.Config, p.State, p.Data} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("create %s: %w", d, err)
		}
	}
	return nil
}

// deviceConfig is the device's non-secret identity, written by `enroll`.
// The token itself lives in the credential store.
type deviceConfig struct {
	Hub             string         `json:"hub"`
	DeviceID        string         `json:"device_id"`
	DeviceName      string         `json:"device_name,omitempty"`
	Projects        []string       `json:"projects"`
	CredentialStore credstore.Kind `json:"credential_store"`
	// CAFile is the --ca-file enroll was given (absolute): the agent trusts
	// it for the hub's TLS unless --ca-file or ROOMRELAY_CA_FILE says otherwise.
	CAFile     string    `json:"ca_file,omitempty"`
	EnrolledAt time.Time `json:"enrolled_at"`
}

const deviceConfigName = "config.json"

var errNotEnrolled = errors.New("this device is not enrolled: get a pairing code from the hub operator (`roomrelay hub pair --project P`) and run `roomrelay enroll --hub URL --code CODE`")

func loadDeviceConfig(p devicePaths) (*deviceConfig, error) {
	b, err := os.ReadFile(filepath.Join(p.Config, deviceConfigName))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, exitErr(ExitNotEnrolled, errNotEnrolled)
	}
	if err != nil {
		return nil, fmt.Errorf("read device config: %w", err)
	}
	var c deviceConfig
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("device config %s is corrupt (enroll again to rewrite it): %w", filepath.Join(p.Config, deviceConfigName), err)
	}
	if c.DeviceID == "" || c.Hub == "" {
		return nil, exitErr(ExitNotEnrolled, errNotEnrolled)
	}
	return &c, nil
}

func saveDeviceConfig(p devicePaths, c *deviceConfig) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.Config, deviceConfigName), append(b, '\n'), 0o600)
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
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

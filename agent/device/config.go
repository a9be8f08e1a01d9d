package device

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/agent/credstore"
)

// Config is the device's non-secret identity, written by Enroll. The token
// itself lives in the credential store.
type Config struct {
	Hub             string         `json:"hub"`
	DeviceID        string         `json:"device_id"`
	DeviceName      string         `json:"device_name,omitempty"`
	Projects        []string       `json:"projects"`
	CredentialStore credstore.Kind `json:"credential_store"`
	// CAFile is the CA file enroll was given (absolute): the agent trusts
	// it for the hub's TLS unless --ca-file or ROOMRELAY_CA_FILE says otherwise.
	CAFile     string    `json:"ca_file,omitempty"`
	EnrolledAt time.Time `json:"enrolled_at"`
}

// ConfigFile is the name of the identity file in the config directory.
const ConfigFile = "config.json"

// ErrNotEnrolled: there is no identity (or one without a device id or hub).
var ErrNotEnrolled = errors.New("this device is not enrolled: get a pairing code from the hub operator (`roomrelay hub pair --project P`) and run `roomrelay enroll --hub URL --code CODE`")

// Kind says what a device workflow's failure needs, so a caller can map it
// to an exit code or a dialog.
type Kind int

const (
	KindFailed      Kind = iota // the workflow ran and failed
	KindUsage                   // the caller gave something unusable (a CA file that does not load)
	KindNotEnrolled             // enroll first
	KindUnavailable             // a service it needs (credential store, hub) is not reachable
	KindRefused                 // the hub refused (a spent or expired pairing code)
)

// Error is a device workflow's failure with its Kind.
type Error struct {
	Kind Kind
	Err  error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

func fail(k Kind, err error) error { return &Error{Kind: k, Err: err} }

// KindOf is err's Kind: an *Error's, KindNotEnrolled for ErrNotEnrolled,
// else KindFailed.
func KindOf(err error) Kind {
	var e *Error
	switch {
	case errors.As(err, &e):
		return e.Kind
	case errors.Is(err, ErrNotEnrolled):
		return KindNotEnrolled
	}
	return KindFailed
}

// LoadConfig reads the identity; ErrNotEnrolled (KindNotEnrolled) when there
// is none.
func LoadConfig(p Paths) (*Config, error) {
	path := filepath.Join(p.Config, ConfigFile)
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fail(KindNotEnrolled, ErrNotEnrolled)
	}
	if err != nil {
		return nil, fmt.Errorf("read device config: %w", err)
	}
	var c Config
	if err := json.Unmarshal(b, &c); err != nil {
		return nil, fmt.Errorf("device config %s is corrupt (enroll again to rewrite it): %w", path, err)
	}
	if c.DeviceID == "" || c.Hub == "" {
		return nil, fail(KindNotEnrolled, ErrNotEnrolled)
	}
	return &c, nil
}

// SaveConfig writes the identity atomically, 0600.
func SaveConfig(p Paths, c *Config) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(p.Config, ConfigFile), append(b, '\n'), 0o600)
}

package agent

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// Connection states reported in Status.State.
const (
	StateConnecting      = "connecting"
	StateOnline          = "online"
	StateBackoff         = "backoff"
	StateSleeping        = "sleeping" // AnnounceSleep was called; waiting for Resume or a wake
	StateNeedsEnrollment = "needs_enrollment"
	StateStopped         = "stopped"
	StateError           = "error"
)

// StatusFile is the name of the status file inside the state directory.
const StatusFile = "status.json"

// Status is a snapshot of the agent, also written to StateDir/status.json so
// `roomrelay status` in another process can show it.
type Status struct {
	State          string    `json:"state"`
	Hub            string    `json:"hub"`
	DeviceID       string    `json:"device_id"`
	SessionID      string    `json:"session_id,omitempty"`
	ConnectedSince time.Time `json:"connected_since,omitzero"`
	LastError      string    `json:"last_error,omitempty"`
	LastErrorAt    time.Time `json:"last_error_at,omitzero"`
	NextRetryAt    time.Time `json:"next_retry_at,omitzero"`
	// Reconnects counts sessions established after the first one.
	Reconnects   int `json:"reconnects"`
	InFlight     int `json:"in_flight"`
	QueuedEvents int `json:"queued_events"`
	// Notes are standing conditions of this run (Config.Notes).
	Notes     []string  `json:"notes,omitempty"`
	PID       int       `json:"pid"`
	UpdatedAt time.Time `json:"updated_at"`
}

// ReadStatusFile reads the status the agent last wrote to stateDir. The PID
// lets a reader tell a live agent from one that stopped without updating it.
func ReadStatusFile(stateDir string) (Status, error) {
	var s Status
	b, err := os.ReadFile(filepath.Join(stateDir, StatusFile))
	if err != nil {
		return s, fmt.Errorf("read agent status: %w", err)
	}
	if err := json.Unmarshal(b, &s); err != nil {
		return s, fmt.Errorf("parse agent status %s: %w", StatusFile, err)
	}
	return s, nil
}

// writeFileAtomic replaces path with data via a temp file and rename, so a
// reader never sees a half-written file. sync makes it durable too.
func writeFileAtomic(path string, data []byte, sync bool) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	tmp := f.Name()
	defer os.Remove(tmp) // no-op after a successful rename
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if sync {
		if err := f.Sync(); err != nil {
			f.Close()
			return err
		}
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func statusPath(dir string) string { return filepath.Join(dir, StatusFile) }

func jsonMarshalIndent(s Status) ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

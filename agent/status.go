package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/roomrelay/roomrelay/agent/events"
	"github.com/roomrelay/roomrelay/internal/replace"
	"github.com/roomrelay/roomrelay/relay"
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

// File names inside the device's directories, in one place for the
// agent, the daemon and the device workflows (agent/device) alike.
const (
	StatusFile = "status.json" // in the state directory
	PolicyFile = "policy"      // in the config directory
	// ReconnectFile, created in the config directory by `roomrelay
	// reconnect`, asks the running agent to skip its backoff wait; the
	// daemon removes it. The config directory because the daemon already
	// watches it for the policy.
	ReconnectFile = "reconnect-now"
	RoomsDB       = "rooms.db" // in the data directory
	AuditDir      = "audit"    // in the state directory
)

// Status is a snapshot of the agent, also written to StateDir/status.json so
// `roomrelay status` in another process can show it. It is agent/events'
// type because a status event carries it to local apps.
type Status = events.Status

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
	return replace.Rename(tmp, path)
}

func statusPath(dir string) string { return filepath.Join(dir, StatusFile) }

func jsonMarshalIndent(s Status) ([]byte, error) { return json.MarshalIndent(s, "", "  ") }

// setStatus applies a state change (connected, disconnected, a problem)
// and writes the status file at once, on the caller's goroutine (the
// supervisor's or Run's, never a socket reader's).
func (a *Agent) setStatus(f func(*Status)) {
	a.smu.Lock()
	f(&a.status)
	a.status.UpdatedAt = a.clock.Now()
	a.smu.Unlock()
	a.writeStatus()
	if a.cfg.OnStatus != nil {
		a.cfg.OnStatus(a.Status())
	}
}

// setCounts updates counters (in flight, queued events). While Run runs,
// the file follows at most once per statusEvery, written by the status
// writer Run owns, so no command waits on a file write; otherwise it is
// written at once.
func (a *Agent) setCounts(f func(*Status)) {
	a.smu.Lock()
	f(&a.status)
	a.status.UpdatedAt = a.clock.Now()
	a.smu.Unlock()
	if !a.lazyStatus.Load() {
		a.writeStatus()
		return
	}
	select {
	case a.statusNudge <- struct{}{}:
	default: // a write is already due
	}
}

// writeStatus writes the latest snapshot. Writes are serialised and each
// writes the snapshot taken under the lock, so the file never goes back in
// time.
func (a *Agent) writeStatus() {
	a.fmu.Lock()
	defer a.fmu.Unlock()
	a.statusWrites.Add(1)
	snap := a.Status()
	// Machine times are UTC (RFC 3339 with Z), whatever the device's zone.
	for _, t := range []*time.Time{&snap.ConnectedSince, &snap.LastErrorAt, &snap.NextRetryAt, &snap.UpdatedAt} {
		if !t.IsZero() {
			*t = t.UTC()
		}
	}
	b, err := jsonMarshalIndent(snap)
	if err == nil {
		err = writeFileAtomic(statusPath(a.cfg.StateDir), b, false)
	}
	if err != nil {
		a.log.Warn("cannot write status file", "err", err)
	}
}

// statusEvery is how often, at most, counter changes reach the status file.
const statusEvery = time.Second

// statusLoop writes the status file after counter changes, at most once
// per statusEvery. It wakes only when nudged: an idle agent gains no wakeups.
// On return, Run's last setStatus writes the final state.
func (a *Agent) statusLoop(ctx context.Context) {
	var last time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.statusNudge:
		}
		if wait := statusEvery - time.Since(last); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		a.writeStatus()
		last = time.Now()
	}
}

// maxLastError bounds the error status.json keeps.
const maxLastError = 1024

// recordError keeps err for `roomrelay status`. It often quotes the hub (an
// HTTP reason phrase, a close reason, a JSON error message), so what is
// stored is one printable line (relay.PrintableLine) and bounded: readers of
// status.json need not know the rule.
func (a *Agent) recordError(err error) {
	a.setStatus(func(s *Status) {
		s.LastError = relay.CutUTF8(relay.PrintableLine(err.Error()), maxLastError)
		s.LastErrorAt = a.clock.Now()
	})
}

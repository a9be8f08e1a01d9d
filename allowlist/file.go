package allowlist

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"

	"github.com/roomrelay/roomrelay/internal/replace"
)

// Load reads and parses the policy file. A file that does not exist is an
// empty policy (deny everything): a fresh device serves nothing. On Unix a
// file that others can write is refused, since whoever can write it can
// widen what the device serves.
func Load(path string) (*Policy, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("load policy: %w", err)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, fmt.Errorf("load policy: %w", err)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return nil, fmt.Errorf("load policy %s: writable by group or others (mode %04o); run chmod 600 on it", path, fi.Mode().Perm())
		}
	}
	p, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("load policy %s: %w", path, err)
	}
	return p, nil
}

// Save writes the policy atomically with mode 0600: a temporary file in the
// same directory, synced, then renamed over path, so a reader (the agent
// reloading) sees the old file or the new one, never half of one.
func (p *Policy) Save(path string) (err error) {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	f, err := os.CreateTemp(dir, ".policy-*.tmp")
	if err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	if err := f.Chmod(0o600); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if _, err := f.Write(p.Marshal()); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if err := f.Sync(); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	if err := replace.Rename(f.Name(), path); err != nil {
		return fmt.Errorf("save policy: %w", err)
	}
	// Make the rename itself durable; not every OS can sync a directory.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return nil
}

// LoadRevision is Load that also returns the file's revision: the hex
// SHA-256 of its bytes (of no bytes when it does not exist), read once, so
// a writer can refuse to replace a file that changed since it was read.
func LoadRevision(path string) (*Policy, string, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return New(), Revision(nil), nil
	}
	if err != nil {
		return nil, "", fmt.Errorf("load policy: %w", err)
	}
	if runtime.GOOS != "windows" {
		fi, err := os.Stat(path)
		if err != nil {
			return nil, "", fmt.Errorf("load policy: %w", err)
		}
		if fi.Mode().Perm()&0o022 != 0 {
			return nil, "", fmt.Errorf("load policy %s: writable by group or others (mode %04o); run chmod 600 on it", path, fi.Mode().Perm())
		}
	}
	p, err := Parse(data)
	if err != nil {
		return nil, "", fmt.Errorf("load policy %s: %w", path, err)
	}
	return p, Revision(data), nil
}

// Revision is the revision of a policy file's bytes.
func Revision(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:16])
}

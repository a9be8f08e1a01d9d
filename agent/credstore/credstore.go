// Package credstore keeps the device's secrets (its hub token). The OS keyring
// comes first; a 0600 file is used only when the user chose it explicitly
// (headless or system installs); otherwise the store refuses with a message
// that says what to do. No other package touches the keyring.
package credstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/roomrelay/roomrelay/internal/ownerfile"
	"github.com/roomrelay/roomrelay/internal/replace"
	"github.com/zalando/go-keyring"
)

// Kind names a backend.
type Kind string

const (
	KindKeyring Kind = "keyring"
	KindFile    Kind = "file"
)

// Service is the keyring service name under which roomrelay stores secrets.
const Service = "roomrelay"

// FileName is the file store's name inside its directory.
const FileName = "credentials.json"

// keyringTimeout bounds a keyring call: a locked keychain or a Secret Service
// waiting on a prompt nobody answers must not hang the agent.
const keyringTimeout = 10 * time.Second

var (
	// ErrNotFound means no secret is stored for the account.
	ErrNotFound = errors.New("no credential stored")
	// ErrKeyringUnavailable means the OS keyring cannot be reached.
	ErrKeyringUnavailable = errors.New("the OS keyring is not reachable")
)

// Store reads and writes secrets by account name (the device id).
type Store interface {
	Get(ctx context.Context, account string) (string, error)
	Set(ctx context.Context, account, secret string) error
	Delete(ctx context.Context, account string) error
	Kind() Kind
	// Where says where secrets live, for `roomrelay status`.
	Where() string
}

// Open returns the store of the given kind. For KindKeyring it probes the
// keyring first and refuses with ErrKeyringUnavailable, explaining the
// alternatives, if it cannot be used. dir is where the file store keeps its
// file (only used for KindFile).
func Open(ctx context.Context, kind Kind, dir string) (Store, error) {
	switch kind {
	case KindKeyring, "":
		k := &keyringStore{}
		if err := k.probe(ctx); err != nil {
			return nil, fmt.Errorf("%w: %v\n  start a Secret Service in your session (e.g. gnome-keyring), run roomrelay as your user rather than as a system service,\n  or choose the file store explicitly with --credential-store file (a 0600 file in %s)", ErrKeyringUnavailable, err, dir)
		}
		return k, nil
	case KindFile:
		if dir == "" {
			return nil, errors.New("file credential store: no directory given")
		}
		return &fileStore{path: filepath.Join(dir, FileName)}, nil
	default:
		return nil, fmt.Errorf("unknown credential store %q: want %q or %q", kind, KindKeyring, KindFile)
	}
}

type keyringStore struct{}

func (*keyringStore) Kind() Kind    { return KindKeyring }
func (*keyringStore) Where() string { return "OS keyring, service " + Service }

// call runs a keyring function with a deadline; the keyring libraries take no
// context, so a stuck call is abandoned (its goroutine ends when D-Bus answers).
func call[T any](ctx context.Context, f func() (T, error)) (T, error) {
	ctx, cancel := context.WithTimeout(ctx, keyringTimeout)
	defer cancel()
	type res struct {
		v   T
		err error
	}
	ch := make(chan res, 1)
	go func() { v, err := f(); ch <- res{v, err} }()
	select {
	case r := <-ch:
		return r.v, r.err
	case <-ctx.Done():
		var zero T
		return zero, fmt.Errorf("keyring did not answer: %w", ctx.Err())
	}
}

func (k *keyringStore) probe(ctx context.Context) error {
	_, err := call(ctx, func() (string, error) { return keyring.Get(Service, "probe.roomrelay") })
	if err == nil || errors.Is(err, keyring.ErrNotFound) {
		return nil
	}
	return err
}

func (k *keyringStore) Get(ctx context.Context, account string) (string, error) {
	s, err := call(ctx, func() (string, error) { return keyring.Get(Service, account) })
	if errors.Is(err, keyring.ErrNotFound) {
		return "", fmt.Errorf("%w for %s in the OS keyring", ErrNotFound, account)
	}
	if err != nil {
		return "", fmt.Errorf("read %s from the OS keyring: %w", account, err)
	}
	return s, nil
}

func (k *keyringStore) Set(ctx context.Context, account, secret string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, keyring.Set(Service, account, secret) })
	if err != nil {
		return fmt.Errorf("store %s in the OS keyring: %w", account, err)
	}
	return nil
}

func (k *keyringStore) Delete(ctx context.Context, account string) error {
	_, err := call(ctx, func() (struct{}, error) { return struct{}{}, keyring.Delete(Service, account) })
	if errors.Is(err, keyring.ErrNotFound) {
		return fmt.Errorf("%w for %s in the OS keyring", ErrNotFound, account)
	}
	if err != nil {
		return fmt.Errorf("delete %s from the OS keyring: %w", account, err)
	}
	return nil
}

// fileStore keeps secrets in one JSON object in a file only its owner can
// read (mode 0600; an owner-only ACL on Windows). It refuses to read a file
// others can read, rather than silently using a leaked secret.
type fileStore struct {
	mu   sync.Mutex
	path string
}

func (*fileStore) Kind() Kind      { return KindFile }
func (f *fileStore) Where() string { return "file " + f.path + " (" + ownerfile.Describe() + ")" }

func (f *fileStore) load() (map[string]string, error) {
	b, err := os.ReadFile(f.path)
	if errors.Is(err, fs.ErrNotExist) {
		return map[string]string{}, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read credential file: %w", err)
	}
	if err := ownerfile.Check(f.path); err != nil {
		var shared *ownerfile.SharedError
		if errors.As(err, &shared) {
			return nil, fmt.Errorf("credential file %s: others can read it (%s); %s and consider rotating the token", f.path, shared.Who, ownerfile.Fix(f.path))
		}
		return nil, fmt.Errorf("credential file: %w", err)
	}
	m := map[string]string{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("credential file %s is corrupt: %w", f.path, err)
	}
	return m, nil
}

func (f *fileStore) save(m map[string]string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(f.path), 0o700); err != nil {
		return fmt.Errorf("create credential dir: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(f.path), ".credentials-*")
	if err != nil {
		return fmt.Errorf("write credential file: %w", err)
	}
	defer os.Remove(tmp.Name())
	if err := ownerfile.Protect(tmp); err != nil { // before the secret is in it
		tmp.Close()
		return fmt.Errorf("credential file: %w", err)
	}
	if _, err := tmp.Write(b); err != nil {
		tmp.Close()
		return fmt.Errorf("write credential file: %w", err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync credential file: %w", err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close credential file: %w", err)
	}
	if err := replace.Rename(tmp.Name(), f.path); err != nil {
		return fmt.Errorf("replace credential file: %w", err)
	}
	return nil
}

func (f *fileStore) Get(_ context.Context, account string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.load()
	if err != nil {
		return "", err
	}
	s, ok := m[account]
	if !ok {
		return "", fmt.Errorf("%w for %s in %s", ErrNotFound, account, f.path)
	}
	return s, nil
}

func (f *fileStore) Set(_ context.Context, account, secret string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.load()
	if err != nil {
		return err
	}
	m[account] = secret
	return f.save(m)
}

func (f *fileStore) Delete(_ context.Context, account string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	m, err := f.load()
	if err != nil {
		return err
	}
	if _, ok := m[account]; !ok {
		return fmt.Errorf("%w for %s in %s", ErrNotFound, account, f.path)
	}
	delete(m, account)
	return f.save(m)
}

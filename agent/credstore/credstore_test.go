package credstore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// exercise runs the store contract: store, read, rotate, delete.
func exercise(t *testing.T, s Store, account string) {
	t.Helper()
	ctx := context.Background()
	if _, err := s.Get(ctx, account); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get before set: %v, want ErrNotFound", err)
	}
	if err := s.Set(ctx, account, "rrdt_first"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, account); err != nil || got != "rrdt_first" {
		t.Fatalf("get = %q, %v", got, err)
	}
	if err := s.Set(ctx, account, "rrdt_rotated"); err != nil {
		t.Fatal(err)
	}
	if got, err := s.Get(ctx, account); err != nil || got != "rrdt_rotated" {
		t.Fatalf("after rotate get = %q, %v", got, err)
	}
	if err := s.Delete(ctx, account); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Get(ctx, account); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get after delete: %v, want ErrNotFound", err)
	}
	if err := s.Delete(ctx, account); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete: %v, want ErrNotFound", err)
	}
}

func TestFileStore(t *testing.T) {
	dir := t.TempDir()
	s, err := Open(context.Background(), KindFile, dir)
	if err != nil {
		t.Fatal(err)
	}
	exercise(t, s, "dev_file")
	if err := s.Set(context.Background(), "dev_keep", "secret"); err != nil {
		t.Fatal(err)
	}
	st, err := os.Stat(filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("credential file mode %04o, want 0600", st.Mode().Perm())
	}
	if !strings.Contains(s.Where(), FileName) {
		t.Fatalf("Where() = %q does not name the file", s.Where())
	}
}

func TestFileStoreRefusesReadableFile(t *testing.T) {
	dir := t.TempDir()
	s, _ := Open(context.Background(), KindFile, dir)
	if err := s.Set(context.Background(), "dev", "secret"); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(filepath.Join(dir, FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(context.Background(), "dev")
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Fatalf("readable file accepted or unclear error: %v", err)
	}
}

func TestUnknownKind(t *testing.T) {
	if _, err := Open(context.Background(), "vault", t.TempDir()); err == nil {
		t.Fatal("unknown kind accepted")
	}
}

// TestKeyring runs against the real OS keyring. CI runs it inside a
// dbus-run-session with an unlocked gnome-keyring; without a Secret Service it
// checks the documented refusal instead, so both outcomes are asserted.
func TestKeyring(t *testing.T) {
	ctx := context.Background()
	s, err := Open(ctx, KindKeyring, t.TempDir())
	if err != nil {
		if !errors.Is(err, ErrKeyringUnavailable) || !strings.Contains(err.Error(), "--credential-store file") {
			t.Fatalf("keyring unavailable but the refusal is not the documented one: %v", err)
		}
		if os.Getenv("ROOMRELAY_REQUIRE_KEYRING") != "" {
			t.Fatalf("ROOMRELAY_REQUIRE_KEYRING is set but the keyring is unavailable: %v", err)
		}
		t.Skipf("no Secret Service here, checked the refusal only (CI runs this with gnome-keyring): %v", err)
	}
	exercise(t, s, "dev_keyring_test")
}

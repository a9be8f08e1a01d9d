package cli

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/credstore"
	"github.com/roomrelay/roomrelay/agent/device"
)

// TestEnrollAgainAfterRevoke: after `hub revoke`, doing what status says —
// `roomrelay enroll` with a new code — enrolls a new device (the hub refuses
// the revoked token before spending the code), replaces the identity in the
// config and removes the old token from the credential store.
func TestEnrollAgainAfterRevoke(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	readConfig := func() device.Config {
		t.Helper()
		var dc device.Config
		b, err := os.ReadFile(filepath.Join(home, "config", device.ConfigFile))
		if err != nil || json.Unmarshal(b, &dc) != nil {
			t.Fatalf("device config %s: %v", b, err)
		}
		return dc
	}
	enroll := func() (int, string) {
		t.Helper()
		pc, err := srv.Pair(ctx, "p1", 0)
		if err != nil {
			t.Fatal(err)
		}
		code, _, errs := run(t, env, "enroll", "--hub", srv.URL(), "--code", pc.Code, "--credential-store", "file", "--name", "laptop")
		return code, errs
	}
	if code, errs := enroll(); code != ExitOK {
		t.Fatalf("first enroll: %d %s", code, errs)
	}
	old := readConfig()
	if _, err := srv.Revoke(ctx, old.DeviceID); err != nil {
		t.Fatal(err)
	}

	code, errs := enroll()
	if code != ExitOK || !strings.Contains(errs, "device "+old.DeviceID+" was revoked: enrolling as a new device") {
		t.Fatalf("enroll after revoke: %d %s", code, errs)
	}
	nw := readConfig()
	if nw.DeviceID == old.DeviceID || nw.DeviceID == "" {
		t.Fatalf("device after re-enroll: %s (was %s)", nw.DeviceID, old.DeviceID)
	}
	cs, err := credstore.Open(ctx, credstore.KindFile, filepath.Join(home, "config"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Get(ctx, old.DeviceID); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("the revoked device's token is still stored: %v", err)
	}
	if _, err := cs.Get(ctx, nw.DeviceID); err != nil {
		t.Fatalf("the new device's token: %v", err)
	}
	if d, err := srv.Device(ctx, nw.DeviceID); err != nil || d.Revoked {
		t.Fatalf("the new device on the hub: %+v, %v", d, err)
	}
}

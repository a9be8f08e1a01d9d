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

// TestUnenroll: the hub revokes the device on its own token, the token and
// identity go, rooms, audit log and policy stay, and the device can enroll
// again. An unreachable hub removes nothing unless --local-only.
func TestUnenroll(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	enroll := func() string { return srv.enroll(t, env, "p1").DeviceID }
	dev := enroll()
	if code, _, errs := run(t, env, "rooms", "create", "--project", "p1", "--name", "Standup", "--id", "r1"); code != ExitOK {
		t.Fatalf("rooms create: %d %s", code, errs)
	}
	if code, _, errs := run(t, env, "enable", "p1"); code != ExitOK {
		t.Fatalf("enable: %d %s", code, errs)
	}
	cs, err := credstore.Open(ctx, credstore.KindFile, filepath.Join(home, "config"))
	if err != nil {
		t.Fatal(err)
	}

	code, out, errs := run(t, env, "unenroll", "--json")
	if code != ExitOK {
		t.Fatalf("unenroll: %d %s", code, errs)
	}
	var r device.Unenrollment
	if err := json.Unmarshal([]byte(out), &r); err != nil || r.DeviceID != dev || !r.HubRevoked {
		t.Fatalf("unenroll said %s (%v)", out, err)
	}
	if !strings.Contains(strings.Join(r.Kept, "|"), "rooms.db") || !strings.Contains(strings.Join(r.Kept, "|"), "audit") {
		t.Errorf("kept: %v", r.Kept)
	}
	if d, err := srv.Device(ctx, dev); err != nil || !d.Revoked {
		t.Fatalf("on the hub after unenroll: %+v %v", d, err)
	}
	if _, err := cs.Get(ctx, dev); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("token still stored: %v", err)
	}
	if _, err := os.Stat(filepath.Join(home, "config", device.ConfigFile)); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("identity still there: %v", err)
	}
	if code, out, _ := run(t, env, "rooms", "list", "--json"); code != ExitOK || !strings.Contains(out, `"r1"`) {
		t.Fatalf("rooms after unenroll: %d %s", code, out)
	}
	if code, out, _ := run(t, env, "status", "--json"); code != ExitNotEnrolled || !strings.Contains(out, "not_enrolled") {
		t.Fatalf("status after unenroll: %d %s", code, out)
	}
	if code, out, _ := run(t, env, "unenroll"); code != ExitOK || !strings.Contains(out, "not enrolled: nothing to do") {
		t.Fatalf("unenroll again: %d %s", code, out)
	}

	// A hub that is down: nothing removed without --local-only.
	dev2 := enroll()
	if dev2 == dev {
		t.Fatal("enrolled again as the revoked device")
	}
	srv.Stop()
	code, _, errs = run(t, env, "unenroll")
	if code != ExitUnavailable || !strings.Contains(errs, "nothing was removed") || !strings.Contains(errs, "--local-only") {
		t.Fatalf("unenroll with the hub down: %d %s", code, errs)
	}
	if _, err := cs.Get(ctx, dev2); err != nil {
		t.Fatalf("token removed although the hub was not told: %v", err)
	}
	code, out, errs = run(t, env, "unenroll", "--local-only")
	if code != ExitOK || !strings.Contains(out, "roomrelay hub revoke "+dev2) {
		t.Fatalf("unenroll --local-only: %d %s %s", code, out, errs)
	}
	if _, err := cs.Get(ctx, dev2); !errors.Is(err, credstore.ErrNotFound) {
		t.Fatalf("token still stored after --local-only: %v", err)
	}
}

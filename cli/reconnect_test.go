package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestReconnect: with no agent running it says so (exit 4); a running
// agent takes the request (the file goes) and the command says so.
func TestReconnect(t *testing.T) {
	t.Parallel()
	srv := startTestHub(t)
	ctx := srv.ctx
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	dc := srv.enroll(t, env, "p1")
	if code, _, errs := run(t, env, "reconnect"); code != ExitUnavailable || !strings.Contains(errs, "not running") {
		t.Fatalf("reconnect without an agent: %d %s", code, errs)
	}
	stop := startAgent(t, env)
	eventually(t, "agent online", func() bool {
		d, err := srv.Device(ctx, dc.DeviceID)
		return err == nil && d.Presence.State == hubapi.StateOnline
	})
	eventually(t, "status written", func() bool { code, _, _ := run(t, env, "status"); return code == 0 })
	code, out, errs := run(t, env, "reconnect")
	if code != ExitOK || !strings.Contains(out, "dialling the hub now") {
		t.Fatalf("reconnect: %d %s %s", code, out, errs)
	}
	if _, err := os.Stat(filepath.Join(home, "config", daemon.ReconnectFile)); !os.IsNotExist(err) {
		t.Fatalf("request file still there: %v", err)
	}
	if logs := stop(); !strings.Contains(logs, "asked to reconnect now") {
		t.Errorf("the agent did not log the request:\n%s", logs)
	}
}

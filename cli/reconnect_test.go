//go:build !agentonly

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// TestReconnect: with no agent running it says so (exit 4); a running
// agent takes the request (the file goes) and the command says so.
func TestReconnect(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	srv, err := startHubServer(ctx, hub.Config{DataDir: t.TempDir(), AdminToken: "rra_t"}, "127.0.0.1:0", "", defaultConnLimits, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.close()
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	pc, err := srv.hub.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "enroll", "--hub", srv.url, "--code", pc.Code, "--credential-store", "file"); code != ExitOK {
		t.Fatalf("enroll: %d %s", code, errs)
	}
	if code, _, errs := run(t, env, "reconnect"); code != ExitUnavailable || !strings.Contains(errs, "not running") {
		t.Fatalf("reconnect without an agent: %d %s", code, errs)
	}
	var dc deviceConfig
	b, _ := os.ReadFile(filepath.Join(home, "config", deviceConfigName))
	if err := json.Unmarshal(b, &dc); err != nil {
		t.Fatal(err)
	}
	stop := startAgent(t, env)
	eventually(t, "agent online", func() bool {
		d, err := srv.hub.Device(ctx, dc.DeviceID)
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

package cli

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/internal/testutil/testhub"
	"github.com/roomrelay/roomrelay/relay/hub"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// testHub is a real hub (embedded NATS) served on loopback for the CLI
// tests, with the admin token "rra_t"; stopped at the end of the test.
// It is the hub library mounted on a listener, not the `roomrelay hub`
// command (cli/hubcmd, which package cli cannot import): the tests here
// are about the device's and the admin's commands.
type testHub struct {
	*testhub.Hub
	ctx context.Context
}

func startTestHub(t *testing.T) *testHub { return startTestHubWith(t, nil, nil) }

// startTestHubWith serves the hub over TLS when tlsCfg is set, logging to
// log when it is set.
func startTestHubWith(t *testing.T, tlsCfg *tls.Config, log *slog.Logger) *testHub {
	t.Helper()
	th := testhub.Start(t, hub.Config{AdminToken: "rra_t", Logger: log}, testhub.Options{TLS: tlsCfg})
	return &testHub{Hub: th, ctx: t.Context()}
}

// enroll runs `roomrelay enroll` (file credential store) for project on
// the home in env with a fresh pairing code, and returns the device config
// it wrote.
func (h *testHub) enroll(t *testing.T, env map[string]string, project string) device.Config {
	t.Helper()
	pc, err := h.Pair(h.ctx, project, 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "enroll", "--hub", h.URL(), "--code", pc.Code, "--credential-store", "file"); code != ExitOK {
		t.Fatalf("enroll: %d %s", code, errs)
	}
	var dc device.Config
	b, err := os.ReadFile(filepath.Join(env["ROOMRELAY_HOME"], "config", device.ConfigFile))
	if err != nil || json.Unmarshal(b, &dc) != nil {
		t.Fatalf("device config %s: %v", b, err)
	}
	return dc
}

// onlineDevice enrolls a device for project p1 with one room r1 (Standup),
// enables p1 allowing allow, starts its agent and waits until the hub shows
// it online: the setup the agent-and-hub tests share.
func (h *testHub) onlineDevice(t *testing.T, allow string) (home string, env map[string]string, dc device.Config, stop func() string) {
	t.Helper()
	home = t.TempDir()
	env = map[string]string{"ROOMRELAY_HOME": home}
	dc = h.enroll(t, env, "p1")
	for _, args := range [][]string{
		{"rooms", "create", "--project", "p1", "--name", "Standup", "--id", "r1"},
		{"enable", "p1", "--allow", allow},
	} {
		if code, _, errs := run(t, env, args...); code != ExitOK {
			t.Fatalf("%v: %d %s", args, code, errs)
		}
	}
	stop = startAgent(t, env)
	eventually(t, "agent online", func() bool {
		d, err := h.Device(h.ctx, dc.DeviceID)
		return err == nil && d.Presence.State == hubapi.StateOnline
	})
	return home, env, dc, stop
}

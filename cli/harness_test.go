//go:build !agentonly

package cli

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/roomrelay/roomrelay/relay/hub"
)

// testHub is a real hub (embedded NATS) served on loopback for the CLI
// tests, with the admin token "rra_t"; stopped at the end of the test.
type testHub struct {
	*hubServer
	ctx context.Context
}

func startTestHub(t *testing.T) *testHub {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	srv, err := startHubServer(ctx, hub.Config{DataDir: t.TempDir(), AdminToken: "rra_t"}, "127.0.0.1:0", "", defaultConnLimits, nil)
	if err != nil {
		cancel()
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.close(); cancel() })
	return &testHub{hubServer: srv, ctx: ctx}
}

// enroll runs `roomrelay enroll` (file credential store) for project on
// the home in env with a fresh pairing code, and returns the device config
// it wrote.
func (h *testHub) enroll(t *testing.T, env map[string]string, project string) deviceConfig {
	t.Helper()
	pc, err := h.hub.Pair(h.ctx, project, 0)
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "enroll", "--hub", h.url, "--code", pc.Code, "--credential-store", "file"); code != ExitOK {
		t.Fatalf("enroll: %d %s", code, errs)
	}
	var dc deviceConfig
	b, err := os.ReadFile(filepath.Join(env["ROOMRELAY_HOME"], "config", deviceConfigName))
	if err != nil || json.Unmarshal(b, &dc) != nil {
		t.Fatalf("device config %s: %v", b, err)
	}
	return dc
}

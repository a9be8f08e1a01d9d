package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent"
	"github.com/roomrelay/roomrelay/agent/audit"
	"github.com/roomrelay/roomrelay/agent/daemon"
	"github.com/roomrelay/roomrelay/agent/localapi"
	"github.com/roomrelay/roomrelay/agent/rooms"
	"github.com/roomrelay/roomrelay/allowlist"
	"github.com/roomrelay/roomrelay/relay"
)

// TestLiveChangesGoThroughTheAgent: with a local API answering on the
// device's home, `review approve` and `enable`/`disable` are made by it
// (audited as localapi.* with decided_via cli), not by the CLI on the files.
func TestLiveChangesGoThroughTheAgent(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	ctx := context.Background()
	for _, d := range []string{"data", "state", "config"} {
		if err := os.MkdirAll(filepath.Join(home, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	store, err := rooms.Open(ctx, filepath.Join(home, "data", daemon.RoomsDB), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	al, err := audit.Open(filepath.Join(home, "state", daemon.AuditDir), audit.Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer al.Close()
	srv, err := localapi.Open(localapi.Config{Listen: localapi.ListenConfig{StateDir: filepath.Join(home, "state")},
		ConfigDir: filepath.Join(home, "config"), Status: func() agent.Status { return agent.Status{State: agent.StateOnline} },
		Proposals: store, Audit: al})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- srv.Run(rctx) }()
	defer func() { cancel(); <-done }()
	for range 500 {
		if _, err := localapi.ReadDiscovery(filepath.Join(home, "config")); err == nil {
			break
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := store.CreateProject(ctx, "p", ""); err != nil {
		t.Fatal(err)
	}
	if _, err := store.CreateRoom(ctx, rooms.NewRoom{ID: "r1", ProjectID: "p", Name: "R"}); err != nil {
		t.Fatal(err)
	}
	pr, _, err := store.CreateProposal(ctx, rooms.NewProposal{ProjectID: "p", RoomID: "r1", Kind: rooms.SourceSnippet, Name: "App",
		Files: map[string]string{"src/App.tsx": "export default function App() { return null }\n"}, IdempotencyKey: "key-00001"})
	if err != nil {
		t.Fatal(err)
	}
	if code, _, errs := run(t, env, "review", "approve", pr.ID, "--hash", strings.Repeat("0", 64)); code == ExitOK || !strings.Contains(errs, "hash_mismatch") {
		t.Fatalf("approve with another hash: %d %s", code, errs)
	}
	if code, out, errs := run(t, env, "review", "approve", pr.ID, "--hash", pr.ContentHash); code != ExitOK || !strings.Contains(out, "running agent") {
		t.Fatalf("approve: %d %s %s", code, out, errs)
	}
	if code, out, errs := run(t, env, "enable", "p", "--allow", relay.CmdProposeRoomSnippetApp); code != ExitOK || !strings.Contains(out, relay.CmdProposeRoomSnippetApp) {
		t.Fatalf("enable: %d %s %s", code, out, errs)
	}
	if code, _, errs := run(t, env, "enable", "p", "--allow", "nope"); code != ExitUsage {
		t.Fatalf("enable an unknown command: %d %s", code, errs)
	}
	if code, _, errs := run(t, env, "disable", "p"); code != ExitOK {
		t.Fatalf("disable: %d %s", code, errs)
	}
	pol, err := allowlist.Load(filepath.Join(home, "config", daemon.PolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	if info, ok := pol.Project("p"); !ok || info.Enabled || len(info.Commands) != 4 {
		t.Fatalf("policy after enable and disable: %+v", info)
	}
	es, err := al.Query(audit.Filter{})
	if err != nil {
		t.Fatal(err)
	}
	var cmds []string
	for _, e := range es {
		cmds = append(cmds, e.Command)
		if e.Command == "localapi.approve" && !strings.Contains(e.Detail, "decided_via=cli") {
			t.Errorf("approve audit line %q", e.Detail)
		}
	}
	if got := strings.Join(cmds, ","); got != "localapi.approve,localapi.enable,localapi.disable" {
		t.Fatalf("audited through the agent: %s", got)
	}
}

// TestCLIRefusesAnotherUsersEndpoint: a discovery file left in the config
// dir that names a socket of another user is never spoken to: `disable`
// says so on stderr and changes the policy file itself (#29.5: it printed
// "disabled" after sending the change to the other user's socket, and the
// policy stayed as it was).
func TestCLIRefusesAnotherUsersEndpoint(t *testing.T) {
	t.Parallel()
	if os.Getuid() != 0 {
		t.Skip("needs root to make a socket another user's")
	}
	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	if code, _, errs := run(t, env, "enable", "p1"); code != ExitOK {
		t.Fatalf("enable: %d %s", code, errs)
	}
	// A socket someone answers on, made another user's.
	dir, err := os.MkdirTemp("", "rr-cli-squat-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	ln, _, err := localapi.Listen(localapi.ListenConfig{StateDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	sock := filepath.Join(dir, localapi.SocketName)
	if err := os.Chown(sock, 65534, 65534); err != nil {
		t.Fatal(err)
	}
	if err := localapi.WriteDiscovery(filepath.Join(home, "config"), localapi.Discovery{Transport: localapi.TransportUnix, Path: sock}); err != nil {
		t.Fatal(err)
	}
	code, _, errs := run(t, env, "disable", "p1")
	if code != ExitOK || !strings.Contains(errs, "warning: local api: not this user's: the socket "+sock+" belongs to uid 65534") {
		t.Fatalf("disable with another user's socket named: %d %s", code, errs)
	}
	p, err := allowlist.Load(filepath.Join(home, "config", daemon.PolicyFile))
	if err != nil {
		t.Fatal(err)
	}
	if pr, ok := p.Project("p1"); !ok || pr.Enabled {
		t.Fatalf("the policy file after disable: %+v %v", pr, ok)
	}
}

// TestAPIRefusalsExitByTheCodeTable: a code of relay's table that the
// running agent's local API refuses with exits by the table's exit code
// (invalid_args, what the owner typed, is a usage error: 2); the local
// API's own codes exit 1.
func TestAPIRefusalsExitByTheCodeTable(t *testing.T) {
	t.Parallel()
	exitOf := func(code string) int {
		err := apiFailure("approved", fmt.Errorf("POST proposals/x/approve: %w", &localapi.APIError{Code: code, Message: "m"}))
		var ee *ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("%s: %v is no ExitError", code, err)
		}
		return ee.Code
	}
	for _, c := range relay.Codes() {
		want := c.ExitCode()
		if c == relay.CodeInvalidArgs {
			want = ExitUsage
		}
		if got := exitOf(string(c)); got != want {
			t.Errorf("%s exits %d, want %d", c, got, want)
		}
	}
	for _, own := range []string{localapi.CodeConflict, localapi.CodeHashMismatch, localapi.CodeForbidden} {
		if got := exitOf(own); got != ExitFailure {
			t.Errorf("%s exits %d, want %d", own, got, ExitFailure)
		}
	}
}

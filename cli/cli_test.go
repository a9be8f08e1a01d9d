package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/agent/device"
)

// run drives Main like the binary does and returns the exit code and output.
func run(t *testing.T, env map[string]string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	e := &Env{Stdout: &out, Stderr: &errb, Getenv: func(k string) string { return env[k] }}
	code := Main(context.Background(), args, e)
	return code, out.String(), errb.String()
}

// TestEveryCommandHasHelp: `--help` works on every registered command and
// names the command, its summary and the shared --log-level flag.
func TestEveryCommandHasHelp(t *testing.T) {
	t.Parallel()
	for name, c := range commands {
		code, out, _ := run(t, nil, append(strings.Fields(name), "--help")...)
		if code != ExitOK {
			t.Errorf("%s --help exited %d", name, code)
		}
		if !strings.Contains(out, "roomrelay "+name) || !strings.Contains(out, c.Summary) || !strings.Contains(out, "--log-level") {
			t.Errorf("%s --help is incomplete:\n%s", name, out)
		}
	}
}

func TestTopLevelHelpAndUnknown(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, nil)
	if code != ExitOK || !strings.Contains(out, "hub pair") || strings.Contains(out, WorkerCommand) {
		t.Fatalf("help: %d\n%s", code, out)
	}
	code, _, errs := run(t, nil, "frobnicate")
	if code != ExitUsage || !strings.Contains(errs, `unknown command "frobnicate"`) {
		t.Fatalf("unknown command: %d %s", code, errs)
	}
	code, _, errs = run(t, nil, "version", "--bogus")
	if code != ExitUsage || !strings.Contains(errs, "flag provided but not defined") {
		t.Fatalf("bad flag: %d %s", code, errs)
	}
}

func TestVersionJSON(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, nil, "version", "--json")
	var v versionInfo
	if code != ExitOK || json.Unmarshal([]byte(out), &v) != nil || v.Protocol != "roomrelay.v1" {
		t.Fatalf("version --json: %d %q", code, out)
	}
}

func TestStatusNotEnrolled(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	code, out, _ := run(t, nil, "status", "--home", home, "--json")
	var r device.Report
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if code != ExitNotEnrolled || r.State != "not_enrolled" || !strings.Contains(r.Fix, "roomrelay enroll") {
		t.Fatalf("status: %d %+v", code, r)
	}
}

// TestRunBackgroundLogsToFile: `run --background` (what the Windows logon
// task runs) writes nothing to stderr; its log, and why it ended, go to
// agent.log in the state dir, where `roomrelay logs` reads on Windows.
func TestRunBackgroundLogsToFile(t *testing.T) {
	t.Parallel()
	if runtime.GOOS == "windows" {
		t.Skip("it would take the console from the test binary itself; .ci/wine-tests runs run --background")
	}
	home := t.TempDir()
	code, out, errs := run(t, nil, "run", "--background", "--home", home)
	if code != ExitNotEnrolled || out != "" || errs != "" {
		t.Fatalf("run --background: %d, stdout %q, stderr %q", code, out, errs)
	}
	b, err := os.ReadFile(filepath.Join(home, "state", "agent.log"))
	if err != nil || !strings.Contains(string(b), "roomrelay run: ") || !strings.Contains(string(b), "not enrolled") {
		t.Fatalf("agent.log: %v\n%s", err, b)
	}
}

func TestRunRefusesWhenNotEnrolled(t *testing.T) {
	t.Parallel()
	code, _, errs := run(t, nil, "run", "--home", t.TempDir())
	if code != ExitNotEnrolled || !strings.Contains(errs, "not enrolled") {
		t.Fatalf("run: %d %s", code, errs)
	}
}

// TestRunRefusesProviderInFlightOutOfRange: --provider-in-flight is a
// usage error outside 1 to provider.MaxMaxInFlight, named in the message,
// before anything else is looked at.
func TestRunRefusesProviderInFlightOutOfRange(t *testing.T) {
	t.Parallel()
	for _, n := range []string{"0", "-1", "1025"} {
		code, _, errs := run(t, nil, "run", "--home", t.TempDir(), "--provider-in-flight", n)
		if code != ExitUsage || !strings.Contains(errs, "--provider-in-flight must be from 1 to 1024") {
			t.Errorf("--provider-in-flight %s: exit %d, %s", n, code, errs)
		}
	}
}

// TestEnableVerbs: --allow adds, --deny removes, --only replaces, a plain
// enable keeps what the project had, and the output names the change.
func TestEnableVerbs(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ROOMRELAY_HOME": t.TempDir()}
	commands := func() string {
		t.Helper()
		code, out, _ := run(t, env, "policy", "show", "--json")
		var v struct {
			Projects []struct {
				Commands []string
				Rooms    []string
				Enabled  bool
			}
		}
		if code != 0 || json.Unmarshal([]byte(out), &v) != nil || len(v.Projects) != 1 {
			t.Fatalf("policy show: %d %s", code, out)
		}
		p := v.Projects[0]
		return fmt.Sprintf("%v %v rooms=%v", p.Enabled, strings.Join(p.Commands, ","), p.Rooms)
	}
	steps := []struct {
		args      []string
		want, out string
	}{
		{[]string{"enable", "p1", "--allow", "propose_room_snippet_app"}, "true read_room,list_room_apps,read_room_app_status,propose_room_snippet_app rooms=[]", "enabled p1: read_room, list_room_apps, read_room_app_status, propose_room_snippet_app"},
		{[]string{"enable", "p1", "--rooms", "r1,r2"}, "true read_room,list_room_apps,read_room_app_status,propose_room_snippet_app rooms=[r1 r2]", "changed: commands unchanged"},
		{[]string{"enable", "p1", "--deny", "list_room_apps,read_room_app_status"}, "true read_room,propose_room_snippet_app rooms=[r1 r2]", "changed: removed list_room_apps, read_room_app_status"},
		{[]string{"enable", "p1", "--allow", "smoke_run_room_app", "--deny", "read_room"}, "true propose_room_snippet_app,smoke_run_room_app rooms=[r1 r2]", "changed: added smoke_run_room_app; removed read_room"},
		{[]string{"disable", "p1"}, "false propose_room_snippet_app,smoke_run_room_app rooms=[r1 r2]", "disabled p1"},
		{[]string{"enable", "p1"}, "true propose_room_snippet_app,smoke_run_room_app rooms=[r1 r2]", "changed: was disabled"},
		{[]string{"enable", "p1", "--only", "read_room", "--rooms", "*"}, "true read_room rooms=[]", "changed: added read_room; removed propose_room_snippet_app, smoke_run_room_app"},
	}
	for _, s := range steps {
		code, out, errs := run(t, env, s.args...)
		if code != 0 || !strings.Contains(out, s.out) {
			t.Fatalf("%v: %d %q %s, want output with %q", s.args, code, out, errs, s.out)
		}
		if got := commands(); got != s.want {
			t.Fatalf("after %v: %s, want %s", s.args, got, s.want)
		}
	}
	for _, bad := range [][]string{
		{"enable", "p1", "--deny", "read_room"}, // nothing left
		{"enable", "p1", "--only", "read_room", "--allow", "list_room_apps"},
		{"enable", "p1", "--deny", "read_rooms"}, // a typo
	} {
		if code, _, errs := run(t, env, bad...); code != ExitUsage || strings.Contains(errs, "enable: enable") {
			t.Errorf("%v: exit %d %s, want a usage error", bad, code, errs)
		}
	}
	if got := commands(); got != "true read_room rooms=[]" {
		t.Errorf("refused edits changed the policy: %s", got)
	}
}

// TestEnablePolicyRoomsAudit walks the owner's local commands on one home.
func TestEnablePolicyRoomsAudit(t *testing.T) {
	t.Parallel()
	env := map[string]string{"ROOMRELAY_HOME": t.TempDir()}
	if code, out, errs := run(t, env, "rooms", "create", "--project", "p1", "--name", "Standup", "--id", "r1"); code != 0 || !strings.Contains(out, "r1") {
		t.Fatalf("rooms create: %d %s %s", code, out, errs)
	}
	code, out, _ := run(t, env, "rooms", "list", "--json")
	if code != 0 || !strings.Contains(out, `"id":"r1"`) {
		t.Fatalf("rooms list: %d %s", code, out)
	}
	if code, _, errs := run(t, env, "enable", "p1", "--allow", "read_room,read_rooms"); code != ExitUsage || !strings.Contains(errs, "read_rooms") {
		t.Fatalf("a typo in --allow was accepted: %d %s", code, errs)
	}
	if code, out, _ := run(t, env, "enable", "p1", "--only", "read_room,list_room_apps", "--rooms", "r1"); code != 0 || !strings.Contains(out, "enabled p1") {
		t.Fatalf("enable: %d %s", code, out)
	}
	code, out, _ = run(t, env, "policy", "show", "--json")
	if code != 0 || !strings.Contains(out, `"commands":["read_room","list_room_apps"]`) {
		t.Fatalf("policy show: %d %s", code, out)
	}
	st, err := os.Stat(filepath.Join(env["ROOMRELAY_HOME"], "config", "policy"))
	if err != nil || (runtime.GOOS != "windows" && st.Mode().Perm() != 0o600) { // no mode bits on Windows
		t.Fatalf("policy file: %v %v", st, err)
	}
	if code, _, _ := run(t, env, "disable", "p1"); code != 0 {
		t.Fatalf("disable: %d", code)
	}
	code, out, _ = run(t, env, "audit", "verify")
	if code != 0 || !strings.Contains(out, "no audit log: no command has reached this device") {
		t.Fatalf("audit verify on an empty log: %d %s", code, out)
	}
	if code, _, _ := run(t, env, "rooms", "show", "nope"); code != ExitFailure {
		t.Fatalf("rooms show of a missing room exited %d", code)
	}
}

func TestHubCommandsNeedAdminToken(t *testing.T) {
	t.Parallel()
	code, _, errs := run(t, nil, "hub", "devices", "--home", t.TempDir(), "--hub", "http://127.0.0.1:1")
	if code != ExitUsage || !strings.Contains(errs, "no admin token") {
		t.Fatalf("hub devices without a token: %d %s", code, errs)
	}
	code, _, errs = run(t, map[string]string{"ROOMRELAY_ADMIN_TOKEN": "x"}, "hub", "devices", "--hub", "http://127.0.0.1:1")
	if code != ExitUnavailable || !strings.Contains(errs, "cannot reach the hub") {
		t.Fatalf("hub devices with no hub: %d %s", code, errs)
	}
}

func TestEnrollRefusesPlainHTTPToRemote(t *testing.T) {
	t.Parallel()
	code, _, errs := run(t, nil, "enroll", "--home", t.TempDir(), "--hub", "http://hub.example.com", "--code", "AAAA-BBBB", "--credential-store", "file")
	if code != ExitUsage || !strings.Contains(errs, "--hub") {
		t.Fatalf("enroll over plain http to a remote host: %d %s", code, errs)
	}
}

// TestDeviceBuildLinksNoServer is the guard of the device binary: what the
// packages ship (cmd/roomrelay-agent, installed as roomrelay) links no NATS
// server, no JavaScript engine, no esbuild and no MCP SDK; only the full
// cmd/roomrelay imports cli/hubcmd and sandbox/worker, which do.
func TestDeviceBuildLinksNoServer(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	if _, err := exec.LookPath("go"); err != nil && runtime.GOOS == "windows" {
		t.Skip("runs go list, and the Go toolchain is not in the Windows (Wine) environment; CI runs this guard on Linux")
	}
	out, err := exec.Command("go", "list", "-deps", "github.com/roomrelay/roomrelay/cmd/roomrelay-agent").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	deps := string(out)
	if !strings.Contains(deps, "github.com/roomrelay/roomrelay/agent\n") {
		t.Fatalf("go list gave no agent package:\n%.500s", deps)
	}
	for _, bad := range []string{"github.com/nats-io/nats-server", "github.com/dop251/goja", "github.com/evanw/esbuild", "github.com/modelcontextprotocol/go-sdk",
		"github.com/roomrelay/roomrelay/cli/hubcmd", "github.com/roomrelay/roomrelay/sandbox/worker", "github.com/roomrelay/roomrelay/relay/hub\n",
		// OpenAPI tooling is for tests and CI only; the local API serves
		// its embedded document as bytes.
		"github.com/getkin/kin-openapi", "github.com/pb33f/", "github.com/danielgtaylor/huma", "github.com/oasdiff/"} {
		if strings.Contains(deps, bad) {
			t.Errorf("the device build links %s", strings.TrimSpace(bad))
		}
	}
}

// TestBuildFlavor: with only cli's own commands (what the device binary
// has, before its main adds the hidden hub and demo stubs) version reports
// the agent build and the sandbox worker is the separate binary; the full
// build's flavour is tested in cli/hubcmd and the stubs in
// cmd/roomrelay-agent.
func TestBuildFlavor(t *testing.T) {
	t.Parallel()
	code, out, _ := run(t, nil, "version", "--json")
	if code != ExitOK || !strings.Contains(out, `"build":"agent"`) {
		t.Fatalf("version --json = %d %s; want build agent", code, out)
	}
	if _, ok := commands["hub"]; ok {
		t.Errorf("package cli registers the hub server itself")
	}
	if workerName() != workerBinary {
		t.Errorf("without the worker subcommand the worker is %q, want %q", workerName(), workerBinary)
	}
}

// TestSpellingsPeopleType: --version, help CMD and `service start` work,
// and a one-shot command does not interleave info logs with its output.
func TestSpellingsPeopleType(t *testing.T) {
	t.Parallel()
	if code, out, _ := run(t, nil, "--version"); code != ExitOK || !strings.Contains(out, "protocol roomrelay.v1") {
		t.Errorf("--version: %d %q", code, out)
	}
	if code, out, _ := run(t, nil, "help", "status"); code != ExitOK || !strings.HasPrefix(out, "Usage: roomrelay status") {
		t.Errorf("help status: %d %q", code, out)
	}
	if code, out, _ := run(t, nil, "help", "hub", "call"); code != ExitOK || !strings.HasPrefix(out, "Usage: roomrelay hub call") {
		t.Errorf("help hub call: %d %q", code, out)
	}
	if code, out, _ := run(t, nil, "service", "start", "--help"); code != ExitOK || !strings.HasPrefix(out, "Usage: roomrelay start") {
		t.Errorf("service start --help: %d %q", code, out)
	}
	env := map[string]string{"ROOMRELAY_HOME": t.TempDir()}
	code, out, errs := run(t, env, "rooms", "list")
	if code != ExitOK || strings.Contains(errs, "level=INFO") || strings.Contains(out, "level=") {
		t.Errorf("rooms list on a fresh home logged at info: %d %q %q", code, out, errs)
	}
	env = map[string]string{"ROOMRELAY_HOME": t.TempDir(), "ROOMRELAY_LOG_LEVEL": "info"}
	if _, _, errs := run(t, env, "rooms", "list"); !strings.Contains(errs, "level=INFO") {
		t.Errorf("ROOMRELAY_LOG_LEVEL=info did not show info logs: %q", errs)
	}
}

// TestJSONFailureIsAnObject: with --json, a failure prints
// {"error":{"code","message","exit_code"}} on stdout (and the human line
// on stderr), so a script never reads silence.
func TestJSONFailureIsAnObject(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	for _, c := range []struct {
		args []string
		code int
		name string
	}{
		{[]string{"enroll", "--hub", "http://127.0.0.1:1", "--code", "ABCD-1234", "--credential-store", "file", "--json"}, ExitUnavailable, "unavailable"},
		{[]string{"enroll", "--code", "ABCD-1234", "--json"}, ExitUsage, "usage"},
		{[]string{"rooms", "show", "nope", "--json"}, ExitFailure, "not_found"},
	} {
		code, out, errs := run(t, map[string]string{"ROOMRELAY_HOME": home}, c.args...)
		var f jsonFailure
		if err := json.Unmarshal([]byte(out), &f); err != nil || code != c.code || f.Error.Code != c.name || f.Error.ExitCode != c.code || f.Error.Message == "" {
			t.Errorf("%v: exit %d, stdout %q (%v), stderr %q; want exit %d and error code %s", c.args, code, out, err, errs, c.code, c.name)
		}
	}
}

package packaging

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// plistCheck is run by python3: it parses a plist with plistlib (a real
// plist parser; there is no plutil off macOS) and checks what launchd
// needs before `launchctl bootstrap` accepts a job: a Label, a
// ProgramArguments array of strings whose first is an absolute path, the
// start and restart choices, absolute log paths, no backslash in a path.
const plistCheck = `
import plistlib, sys
with open(sys.argv[1], "rb") as f:
    p = plistlib.load(f, fmt=plistlib.FMT_XML)
system = sys.argv[2] == "system"
errs = []
def need(ok, msg):
    if not ok: errs.append(msg)
need(p.get("Label") == "roomrelay", "Label must be roomrelay: %r" % p.get("Label"))
args = p.get("ProgramArguments")
need(isinstance(args, list) and args and all(isinstance(a, str) for a in args), "ProgramArguments must be a non-empty array of strings")
if args:
    need(args[0].startswith("/"), "ProgramArguments[0] must be absolute: %r" % args[0])
    need(args[1:2] == ["run"], "the job must run 'roomrelay run': %r" % args)
need(p.get("RunAtLoad") is True, "RunAtLoad must be true (start at login/boot)")
need(p.get("KeepAlive") == {"SuccessfulExit": False}, "KeepAlive must restart after a crash only: %r" % p.get("KeepAlive"))
need(isinstance(p.get("ThrottleInterval"), int) and p["ThrottleInterval"] >= 10, "ThrottleInterval must slow a crash loop")
for k in ("StandardOutPath", "StandardErrorPath"):
    need(isinstance(p.get(k), str) and p[k].startswith("/") and p[k].endswith(".log"), "%s must be an absolute .log path: %r" % (k, p.get(k)))
need(("UserName" in p) == system, "UserName only in a LaunchDaemon")
known = {"Label", "ProgramArguments", "EnvironmentVariables", "UserName", "RunAtLoad", "KeepAlive", "ThrottleInterval", "ProcessType", "StandardOutPath", "StandardErrorPath"}
need(set(p) <= known, "keys launchd would not know: %r" % (set(p) - known))
# A path built with Windows separators (a filepath.Join on the wrong OS)
# is a file launchd cannot find; a backslash inside an argument is legal.
for v in [args[0] if args else ""] + [p.get("StandardOutPath", ""), p.get("StandardErrorPath", "")]:
    need("\\" not in v, "backslash in the path %r" % v)
for e in errs: print(e)
sys.exit(1 if errs else 0)
`

// TestLaunchdPlistLoads validates every plist roomrelay writes with
// python3's plistlib and the keys launchd requires. CI has python3; a
// machine without it skips (the golden files still pin the text).
func TestLaunchdPlistLoads(t *testing.T) {
	py, err := exec.LookPath("python3")
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("python3 is needed to validate the launchd plists")
		}
		t.Skip("no python3")
	}
	dir := t.TempDir()
	spacey := awkward
	spacey.LogDir = "/Users/Ann Lee/Library/Logs"
	for name, tc := range map[string]struct {
		p      Params
		system bool
	}{
		"agent":      {Params{Exec: "/usr/local/bin/roomrelay", Args: []string{"run"}, LogDir: "/Users/ann/Library/Logs"}, false},
		"agent-home": {spacey, false},
		"daemon":     {Params{Exec: "/usr/local/bin/roomrelay", Args: []string{"run", "--home", "/var/lib/roomrelay"}, User: "_roomrelay", LogDir: "/Library/Logs"}, true},
	} {
		out, err := LaunchdPlist(tc.p, tc.system)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, name+".plist")
		if err := os.WriteFile(path, []byte(out), 0o644); err != nil {
			t.Fatal(err)
		}
		kind := map[bool]string{false: "agent", true: "system"}[tc.system]
		if b, err := exec.Command(py, "-c", plistCheck, path, kind).CombinedOutput(); err != nil {
			t.Errorf("%s: launchd would not accept it: %v\n%s", name, err, strings.TrimSpace(string(b)))
		}
	}
}

package testutil

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// PrivateBus runs a private session-type dbus-daemon (anyone may own names
// and send anything) for the test, and returns its address and a function
// that kills it early (it is killed at the end of the test in any case).
// Without dbus-daemon the test skips, or fails when ROOMRELAY_REQUIRE_DBUS=1
// (CI: .ci/install-deps installs it).
func PrivateBus(t testing.TB, what string) (addr string, kill func()) {
	t.Helper()
	bin, err := exec.LookPath("dbus-daemon")
	if err != nil {
		msg := "dbus-daemon is not installed (Debian package dbus; .ci/install-deps installs it): " + what + " is untested here"
		if os.Getenv("ROOMRELAY_REQUIRE_DBUS") == "1" {
			t.Fatal(msg + " (ROOMRELAY_REQUIRE_DBUS=1: required, not skipped)")
		}
		t.Skip(msg + "; set ROOMRELAY_REQUIRE_DBUS=1 to fail instead")
	}
	dir := t.TempDir()
	conf := filepath.Join(dir, "bus.conf")
	err = os.WriteFile(conf, []byte(`<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=`+filepath.Join(dir, "bus")+`</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
</busconfig>
`), 0o600)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, "--config-file="+conf, "--nofork", "--print-address")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	// dbus-daemon complains about fd limits when not root: shown only if
	// the test fails.
	var stderr SyncBuffer
	cmd.Stderr = &stderr
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("dbus-daemon stderr:\n%s", stderr.String())
		}
	})
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	kill = func() {
		once.Do(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
	}
	t.Cleanup(kill)
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("dbus-daemon printed no address: %v", err)
	}
	return strings.TrimSpace(line), kill
}

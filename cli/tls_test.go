package cli

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/agent/device"
	"github.com/roomrelay/roomrelay/internal/testutil"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay/hubapi"
)

// startAgent runs `roomrelay run` until the returned stop is called.
func startAgent(t *testing.T, env map[string]string, args ...string) (stop func() string) {
	t.Helper()
	var out testutil.SyncBuffer
	e := &Env{Stdout: &out, Stderr: &out, Getenv: func(k string) string { return env[k] }}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() { done <- Main(ctx, append([]string{"run", "--no-sandbox"}, args...), e) }()
	var once sync.Once
	stop = func() string {
		once.Do(func() {
			cancel()
			select {
			case <-done:
			case <-time.After(30 * time.Second):
				t.Error("roomrelay run did not stop")
			}
		})
		return out.String()
	}
	t.Cleanup(func() { stop() })
	return stop
}

// TestHubTLSWithPrivateCA: a hub serving HTTPS with the certificate
// reloader `roomrelay hub --tls-cert/--tls-key` uses; enroll and the admin commands without the CA fail with the
// --ca-file hint (not "is the hub running?"), with --ca-file or
// ROOMRELAY_CA_FILE they work; enroll records the CA so `roomrelay run`
// connects over wss with it, and a wrong CA shows the hint in `roomrelay
// status`. Then the certificate files are replaced: new handshakes get the
// new certificate from the same running server, and a broken replacement
// leaves the previous one served.
func TestHubTLSWithPrivateCA(t *testing.T) {
	t.Parallel()
	tlsDir := t.TempDir()
	ca := testutil.NewCA(t, "roomrelay test CA")
	caFile, certFile, keyFile := ca.WriteFiles(tlsDir, "127.0.0.1", "localhost")
	var hubLogs testutil.SyncBuffer
	log := slog.New(slog.NewTextHandler(&hubLogs, nil))

	// What `roomrelay hub --tls-cert --tls-key` serves with (cli/hubcmd).
	r, err := tlsfiles.NewCertReloader(tlsfiles.ReloaderConfig{CertFile: certFile, KeyFile: keyFile, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	srv := startTestHubWith(t, r.ServerConfig(), log)
	ctx := srv.ctx
	if !strings.HasPrefix(srv.URL(), "https://") {
		t.Fatalf("the hub serves %s, want https", srv.URL())
	}
	pc, err := srv.Pair(ctx, "p1", 0)
	if err != nil {
		t.Fatal(err)
	}

	home := t.TempDir()
	env := map[string]string{"ROOMRELAY_HOME": home}
	enroll := []string{"enroll", "--hub", srv.URL(), "--code", pc.Code, "--credential-store", "file", "--name", "laptop"}
	code, _, errs := run(t, env, enroll...)
	if code != ExitUnavailable || !strings.Contains(errs, tlsfiles.UntrustedHint) || strings.Contains(errs, "is `roomrelay hub` running") {
		t.Fatalf("enroll without the CA: %d %s", code, errs)
	}
	if code, _, errs := run(t, env, append(enroll, "--ca-file", caFile)...); code != 0 {
		t.Fatalf("enroll with --ca-file: %d %s", code, errs)
	}
	var dc device.Config
	b, err := os.ReadFile(filepath.Join(home, "config", device.ConfigFile))
	if err != nil || json.Unmarshal(b, &dc) != nil || dc.CAFile != caFile {
		t.Fatalf("device config %s (%v): want ca_file %s", b, err, caFile)
	}

	admin := []string{"hub", "devices", "--hub", srv.URL(), "--admin-token", "rra_t", "--json"}
	if code, _, errs := run(t, nil, admin...); code != ExitUnavailable || !strings.Contains(errs, tlsfiles.UntrustedHint) {
		t.Fatalf("hub devices without the CA: %d %s", code, errs)
	}
	code, out, errs := run(t, map[string]string{"ROOMRELAY_CA_FILE": caFile}, admin...)
	if code != 0 || !strings.Contains(out, dc.DeviceID) {
		t.Fatalf("hub devices with ROOMRELAY_CA_FILE: %d %s %s", code, out, errs)
	}

	// The agent uses the CA enroll recorded: online over wss.
	online := func() bool {
		d, err := srv.Device(ctx, dc.DeviceID)
		return err == nil && d.Presence.State == hubapi.StateOnline
	}
	stop := startAgent(t, env)
	eventually(t, "the agent online over wss", online)
	// The hub marks the device online on hello; the agent writes its
	// status once the welcome is back.
	eventually(t, "status online", func() bool { code, _, _ := run(t, env, "status", "--json"); return code == 0 })
	stop()
	eventually(t, "the agent offline", func() bool { return !online() })

	// --ca-file overrides the recorded one: with another CA the agent is
	// refused by TLS, and status says what to do.
	otherCA, _, _ := testutil.NewCA(t, "another CA").WriteFiles(t.TempDir(), "127.0.0.1")
	stop = startAgent(t, env, "--ca-file", otherCA)
	var st device.Report
	eventually(t, "status names the untrusted certificate", func() bool {
		_, out, _ := run(t, env, "status", "--json")
		st = device.Report{}
		return json.Unmarshal([]byte(out), &st) == nil && strings.Contains(st.Problem, tlsfiles.UntrustedHint)
	})
	if !strings.Contains(st.Fix, "--ca-file") || strings.Contains(st.Fix, "is up") {
		t.Errorf("status fix for an untrusted certificate: %q", st.Fix)
	}
	stop()

	// Certificate renewal without a restart.
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)
	addr := strings.TrimPrefix(srv.URL(), "https://")
	served := func() *big.Int {
		c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots})
		if err != nil {
			t.Fatalf("handshake: %v", err)
		}
		defer c.Close()
		return c.ConnectionState().PeerCertificates[0].SerialNumber
	}
	renewedCert, renewedKey, renewed := ca.Issue("127.0.0.1")
	replace := func(cert, key []byte) {
		t.Helper()
		// Write next to the files and rename, as certbot and friends do.
		for f, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if err := os.WriteFile(f+".new", b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(f+".new", f); err != nil {
				t.Fatal(err)
			}
		}
	}
	replace(renewedCert, renewedKey)
	eventually(t, "the renewed certificate served", func() bool { return served().Cmp(renewed) == 0 })

	replace([]byte("-----BEGIN CERTIFICATE-----\nbroken\n"), renewedKey)
	eventually(t, "a warning about the broken certificate", func() bool {
		served()
		return strings.Contains(hubLogs.String(), "does not load")
	})
	if got := served(); got.Cmp(renewed) != 0 {
		t.Fatalf("after a broken replacement the hub serves %v, want the previous %v", got, renewed)
	}
	// The same server all along: the enrolled device's token still works
	// against it, and its store kept the device.
	if _, err := srv.Device(ctx, dc.DeviceID); err != nil {
		t.Fatalf("the device after the reloads: %v", err)
	}
}

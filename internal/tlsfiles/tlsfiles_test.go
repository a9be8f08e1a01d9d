package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/roomrelay/roomrelay/internal/testutil"
)

// serveTLS serves handshakes with cfg on loopback until the test ends.
func serveTLS(t *testing.T, cfg *tls.Config) string {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_ = c.(*tls.Conn).Handshake()
				_, _ = io.Copy(io.Discard, c)
			}()
		}
	}()
	return ln.Addr().String()
}

// servedSerial does a fresh handshake and returns the leaf's serial.
func servedSerial(t *testing.T, addr string, roots *x509.CertPool) *big.Int {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{RootCAs: roots, ServerName: "hub.test"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return c.ConnectionState().PeerCertificates[0].SerialNumber
}

// TestReloadOnChange: a server using the reloader serves a rewritten pair
// to the next handshake without a restart; a broken rewrite (garbage, or a
// key of another certificate) keeps the previous certificate and warns.
func TestReloadOnChange(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	certFile, keyFile := filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	mtime := time.Now()
	write := func(cert, key []byte) {
		t.Helper()
		mtime = mtime.Add(time.Second) // a change the stat sees, whatever the fs granularity
		for f, b := range map[string][]byte{certFile: cert, keyFile: key} {
			if b == nil {
				continue
			}
			if err := os.WriteFile(f, b, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Chtimes(f, mtime, mtime); err != nil {
				t.Fatal(err)
			}
		}
	}
	c1, k1, s1 := ca.Issue("hub.test")
	write(c1, k1)

	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	tick := func() { clock.Add(int64(2 * DefaultCheckEvery)) }
	var logs testutil.SyncBuffer
	r, err := NewCertReloader(ReloaderConfig{CertFile: certFile, KeyFile: keyFile,
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Now: func() time.Time { return time.Unix(0, clock.Load()) }})
	if err != nil {
		t.Fatal(err)
	}
	cfg := r.ServerConfig()
	if cfg.MinVersion != tls.VersionTLS12 {
		t.Errorf("MinVersion %x, want TLS 1.2", cfg.MinVersion)
	}
	addr := serveTLS(t, cfg)
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(ca.PEM)

	if got := servedSerial(t, addr, roots); got.Cmp(s1) != 0 {
		t.Fatalf("served serial %v, want the first certificate's %v", got, s1)
	}

	// Renewed: the next handshake after the check interval sees it.
	c2, k2, s2 := ca.Issue("hub.test")
	write(c2, k2)
	tick()
	if got := servedSerial(t, addr, roots); got.Cmp(s2) != 0 {
		t.Fatalf("after the rewrite the server still serves %v, want the new %v", got, s2)
	}

	// Garbage in the certificate file: the previous pair keeps serving.
	write([]byte("not a certificate"), nil)
	tick()
	if got := servedSerial(t, addr, roots); got.Cmp(s2) != 0 {
		t.Fatalf("after a broken rewrite the server serves %v, want the previous %v", got, s2)
	}
	if !strings.Contains(logs.String(), "does not load") {
		t.Errorf("no warning about the broken pair; logs:\n%s", logs.String())
	}

	// A certificate with the key of another: still the previous pair.
	c3, _, _ := ca.Issue("hub.test")
	write(c3, k2)
	tick()
	if got := servedSerial(t, addr, roots); got.Cmp(s2) != 0 {
		t.Fatalf("after a mismatched pair the server serves %v, want the previous %v", got, s2)
	}

	// Fixed: loads again.
	c4, k4, s4 := ca.Issue("hub.test")
	write(c4, k4)
	tick()
	if got := servedSerial(t, addr, roots); got.Cmp(s4) != 0 {
		t.Fatalf("after a fixed pair the server serves %v, want %v", got, s4)
	}
}

// TestNewCertReloaderRefusesABadPair: the hub does not start on a pair that
// does not load.
func TestNewCertReloaderRefusesABadPair(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	_, certFile, _ := ca.WriteFiles(dir, "hub.test")
	_, otherKey, _ := ca.Issue("hub.test")
	keyFile := filepath.Join(dir, "other-key.pem")
	if err := os.WriteFile(keyFile, otherKey, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := NewCertReloader(ReloaderConfig{CertFile: certFile, KeyFile: keyFile}); err == nil {
		t.Fatal("a mismatched pair was accepted")
	}
	if _, err := NewCertReloader(ReloaderConfig{CertFile: certFile, KeyFile: filepath.Join(dir, "missing")}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("missing key: %v", err)
	}
}

// TestExplain: an untrusted or misnamed certificate gets the hint that says
// what to do, and LoadCAPool makes the same handshake succeed.
func TestExplain(t *testing.T) {
	dir := t.TempDir()
	ca := testutil.NewCA(t, "test CA")
	caFile, certFile, keyFile := ca.WriteFiles(dir, "hub.test")
	r, err := NewCertReloader(ReloaderConfig{CertFile: certFile, KeyFile: keyFile})
	if err != nil {
		t.Fatal(err)
	}
	addr := serveTLS(t, r.ServerConfig())

	_, err = tls.Dial("tcp", addr, &tls.Config{ServerName: "hub.test"})
	if err == nil {
		t.Fatal("a private-CA certificate verified against the system roots")
	}
	if ex := Explain(err); ex == nil || !strings.Contains(ex.Error(), "--ca-file") || !strings.Contains(ex.Error(), "ROOMRELAY_CA_FILE") {
		t.Errorf("untrusted: %v", ex)
	}

	cfg, err := ClientConfig(caFile)
	if err != nil {
		t.Fatal(err)
	}
	cfg.ServerName = "hub.test"
	c, err := tls.Dial("tcp", addr, cfg)
	if err != nil {
		t.Fatalf("with the CA file: %v", err)
	}
	c.Close()

	cfg.ServerName = "other.test"
	_, err = tls.Dial("tcp", addr, cfg)
	if ex := Explain(err); ex == nil || !strings.Contains(ex.Error(), `not valid for the host "other.test"`) {
		t.Errorf("hostname mismatch: %v", ex)
	}
	if Explain(errors.New("connection refused")) != nil {
		t.Error("a plain network error was explained as a certificate problem")
	}
	if _, err := LoadCAPool(certFile + ".missing"); err == nil {
		t.Error("a missing CA file loaded")
	}
	if err := os.WriteFile(filepath.Join(dir, "empty.pem"), []byte("nothing"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCAPool(filepath.Join(dir, "empty.pem")); err == nil {
		t.Error("a CA file without certificates loaded")
	}
}

// Package tlsfiles is TLS from files, for the hub and its clients: a server
// certificate that is reloaded when its files change (a renewed certificate
// needs no restart), a CA pool for clients that trust a private CA, and the
// hint a client shows when a hub's certificate is not trusted.
package tlsfiles

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"
)

// DefaultCheckEvery is how often GetCertificate looks at the files at most.
const DefaultCheckEvery = time.Second

// CertReloader serves a certificate and key pair from two PEM files and
// reloads them when either file changes. It only re-stats the files on a
// handshake, at most every CheckEvery, so an idle server does no work. A new
// pair that does not load (half written, key of another certificate) is
// logged and the previous one kept; it is tried again when a file changes
// again.
type CertReloader struct {
	certFile, keyFile string
	every             time.Duration
	log               *slog.Logger
	now               func() time.Time

	mu      sync.Mutex
	cert    *tls.Certificate
	stamp   [2]fileStamp // of the last pair tried, loaded or not
	checked time.Time
}

type fileStamp struct {
	mod  time.Time
	size int64
}

// ReloaderConfig configures NewCertReloader.
type ReloaderConfig struct {
	CertFile, KeyFile string
	// CheckEvery bounds how often the files are stat'ed (default DefaultCheckEvery).
	CheckEvery time.Duration
	Logger     *slog.Logger // default: discarded
	Now        func() time.Time
}

// NewCertReloader loads the pair once, and fails if it does not load.
func NewCertReloader(cfg ReloaderConfig) (*CertReloader, error) {
	if cfg.CheckEvery <= 0 {
		cfg.CheckEvery = DefaultCheckEvery
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	r := &CertReloader{certFile: cfg.CertFile, keyFile: cfg.KeyFile, every: cfg.CheckEvery, log: cfg.Logger, now: cfg.Now}
	st, err := r.stat()
	if err != nil {
		return nil, err
	}
	cert, err := r.load()
	if err != nil {
		return nil, err
	}
	r.cert, r.stamp, r.checked = cert, st, r.now()
	return r, nil
}

func (r *CertReloader) stat() ([2]fileStamp, error) {
	var st [2]fileStamp
	for i, f := range []string{r.certFile, r.keyFile} {
		fi, err := os.Stat(f)
		if err != nil {
			return st, fmt.Errorf("tls: %w", err)
		}
		st[i] = fileStamp{mod: fi.ModTime(), size: fi.Size()}
	}
	return st, nil
}

func (r *CertReloader) load() (*tls.Certificate, error) {
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return nil, fmt.Errorf("tls: load %s and %s: %w", r.certFile, r.keyFile, err)
	}
	return &cert, nil
}

// GetCertificate is the tls.Config hook.
func (r *CertReloader) GetCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	now := r.now()
	if now.Sub(r.checked) < r.every {
		return r.cert, nil
	}
	r.checked = now
	st, err := r.stat()
	if err != nil {
		// Mid-rename, or removed: keep serving what we have.
		r.log.Warn("cannot check the TLS certificate files; serving the loaded certificate", "err", err)
		return r.cert, nil
	}
	if st == r.stamp {
		return r.cert, nil
	}
	r.stamp = st
	cert, err := r.load()
	if err != nil {
		r.log.Warn("the changed TLS certificate does not load; still serving the previous one", "err", err)
		return r.cert, nil
	}
	r.cert = cert
	r.log.Info("reloaded the TLS certificate", "cert", r.certFile, "not_after", notAfter(cert))
	return r.cert, nil
}

func notAfter(c *tls.Certificate) time.Time {
	if c.Leaf != nil {
		return c.Leaf.NotAfter
	}
	if len(c.Certificate) > 0 {
		if leaf, err := x509.ParseCertificate(c.Certificate[0]); err == nil {
			return leaf.NotAfter
		}
	}
	return time.Time{}
}

// ServerConfig is a server's tls.Config serving r's certificate, TLS 1.2 and
// up, HTTP/1.1 only (the agent endpoint is a websocket upgrade).
func (r *CertReloader) ServerConfig() *tls.Config {
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.GetCertificate, NextProtos: []string{"http/1.1"}}
}

// LoadCAPool returns the system's roots plus the PEM certificates in file,
// so a hub with a private CA and one with a public certificate both verify.
func LoadCAPool(file string) (*x509.CertPool, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("CA file: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil || pool == nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(b) {
		return nil, fmt.Errorf("CA file %s holds no PEM certificate", file)
	}
	return pool, nil
}

// ClientConfig is a client's tls.Config trusting the CA in caFile besides
// the system's roots; nil (the defaults) when caFile is empty.
func ClientConfig(caFile string) (*tls.Config, error) {
	if caFile == "" {
		return nil, nil
	}
	pool, err := LoadCAPool(caFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: pool}, nil
}

// HTTPClient is an HTTP client trusting caFile besides the system's roots;
// nil (http.DefaultClient) when caFile is empty.
func HTTPClient(caFile string) (*http.Client, error) {
	cfg, err := ClientConfig(caFile)
	if err != nil || cfg == nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}

// UntrustedHint is what a client says when the hub's certificate does not
// verify against its roots.
const UntrustedHint = "the hub's TLS certificate is not trusted by this machine: pass --ca-file FILE (or set ROOMRELAY_CA_FILE) with the CA that signed it"

// Explain returns err with what to do when it is a certificate verification
// failure (unknown authority, hostname mismatch, expired), or nil when it
// is not one.
func Explain(err error) error {
	if err == nil {
		return nil
	}
	var he x509.HostnameError
	if errors.As(err, &he) {
		return fmt.Errorf("%w: the hub's TLS certificate is not valid for the host %q (it names %s): use the hub URL with a name the certificate holds, or reissue it", err, he.Host, certNames(he.Certificate))
	}
	var ua x509.UnknownAuthorityError
	var cve *tls.CertificateVerificationError
	if errors.As(err, &ua) || errors.As(err, &cve) {
		var inv x509.CertificateInvalidError
		if errors.As(err, &inv) && inv.Reason == x509.Expired {
			return fmt.Errorf("%w: the hub's TLS certificate has expired or is not valid yet (check the clocks and the hub's certificate)", err)
		}
		return fmt.Errorf("%w: %s", err, UntrustedHint)
	}
	return nil
}

func certNames(c *x509.Certificate) string {
	if c == nil {
		return "no names"
	}
	var names []string
	names = append(names, c.DNSNames...)
	for _, ip := range c.IPAddresses {
		names = append(names, ip.String())
	}
	if len(names) == 0 {
		return "no subject alternative names"
	}
	return fmt.Sprint(names)
}

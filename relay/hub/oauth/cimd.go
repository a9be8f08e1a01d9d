package oauth

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Client ID metadata documents (CIMD, draft-ietf-oauth-client-id-metadata-
// document, preferred by MCP 2025-11-25 and later): a client_id that is an
// https URL names a JSON document, published by the client's vendor, with
// its name and redirect URIs. Off by default; on for an operator allowlist
// of hosts (--oauth-cimd-host). The hub then fetches a URL on a listed
// host itself, which makes every rule here an SSRF guard: https only, the
// host listed, the address it resolves to public (checked at dial time, so
// DNS rebinding cannot slip an internal address in), no redirects, a size
// cap, a timeout, a JSON body whose client_id is exactly its URL, and the
// registration rules for everything in it. Documents are cached per node,
// bounded in count and age.

const (
	cimdMaxBytes   = 5 << 10 // a document is a few hundred bytes
	cimdTimeout    = 5 * time.Second
	cimdMaxEntries = 256
	cimdDefaultTTL = 5 * time.Minute
	cimdMaxTTL     = 24 * time.Hour
	cimdMaxURL     = 512
)

// cimdFetcher fetches and caches client ID metadata documents.
type cimdFetcher struct {
	s     *Server
	hosts []string
	hc    *http.Client
	// allowPrivate lets tests fetch from a loopback httptest server; the
	// hub never sets it.
	allowPrivate bool
	timeout      time.Duration

	mu    sync.Mutex
	cache map[string]cimdEntry
}

type cimdEntry struct {
	c       *clientRec
	expires time.Time
}

func newCIMDFetcher(s *Server, hosts []string, roots *x509.CertPool, allowPrivate bool, timeout time.Duration) *cimdFetcher {
	if timeout <= 0 {
		timeout = cimdTimeout
	}
	f := &cimdFetcher{s: s, hosts: hosts, allowPrivate: allowPrivate, timeout: timeout, cache: map[string]cimdEntry{}}
	d := &net.Dialer{Timeout: timeout, Control: f.checkAddr}
	f.hc = &http.Client{
		Timeout: timeout,
		Transport: &http.Transport{
			DialContext:           d.DialContext,
			TLSClientConfig:       &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12},
			TLSHandshakeTimeout:   timeout,
			ResponseHeaderTimeout: timeout,
			MaxIdleConns:          4,
			IdleConnTimeout:       30 * time.Second,
			DisableCompression:    true, // the size cap counts what is sent
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return errCIMDRedirect },
	}
	return f
}

var errCIMDRedirect = errors.New("redirect")

// checkAddr refuses, at dial time, an address that is not public
// (addrguard.go): the resolved IP, not the name, is what reaches the network.
func (f *cimdFetcher) checkAddr(_, address string, _ syscall.RawConn) error {
	if f.allowPrivate {
		return nil
	}
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		return err
	}
	a, err := netip.ParseAddr(host)
	if err != nil {
		return fmt.Errorf("the host resolves to %q, not an IP address: refused (SSRF guard)", host)
	}
	if why := publicAddr(a); why != "" {
		return fmt.Errorf("the host resolves to %s: refused, not a global unicast address (a loopback, private or link-local address, or another special-purpose range; SSRF guard)", why)
	}
	return nil
}

// isCIMD reports whether clientID names a metadata document (an https
// URL) while CIMD is on.
func (s *Server) isCIMD(clientID string) bool {
	return s.cimd != nil && strings.HasPrefix(clientID, "https://")
}

// cimdClient returns the client a metadata document describes, from the
// cache or fetched; the error says which rule refused it.
func (f *cimdFetcher) client(ctx context.Context, clientID string) (*clientRec, error) {
	now := f.s.cfg.Now()
	f.mu.Lock()
	e, ok := f.cache[clientID]
	f.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.c, nil
	}
	c, ttl, err := f.fetch(ctx, clientID)
	if err != nil {
		return nil, err
	}
	if ttl > 0 {
		f.put(clientID, cimdEntry{c: c, expires: now.Add(ttl)}, now)
	}
	return c, nil
}

// put caches e, first dropping expired entries and then, at the bound, the
// one closest to expiry.
func (f *cimdFetcher) put(key string, e cimdEntry, now time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.cache[key]; !ok && len(f.cache) >= cimdMaxEntries {
		var oldest string
		for k, v := range f.cache {
			if !now.Before(v.expires) {
				delete(f.cache, k)
				continue
			}
			if oldest == "" || v.expires.Before(f.cache[oldest].expires) {
				oldest = k
			}
		}
		if len(f.cache) >= cimdMaxEntries {
			delete(f.cache, oldest)
		}
	}
	f.cache[key] = e
}

// checkURL applies the draft's client_id rules and the operator's list.
func (f *cimdFetcher) checkURL(raw string) error {
	if len(raw) > cimdMaxURL {
		return fmt.Errorf("the client_id URL is longer than %d bytes", cimdMaxURL)
	}
	u, err := url.Parse(raw)
	switch {
	case err != nil || u.Scheme != "https" || u.Host == "":
		return errors.New("a client_id URL must be an absolute https URL")
	case u.User != nil:
		return errors.New("a client_id URL must not carry user info")
	case u.Fragment != "" || strings.Contains(raw, "#"):
		return errors.New("a client_id URL must not have a fragment")
	case u.RawQuery != "" || strings.Contains(raw, "?"):
		return errors.New("a client_id URL must not have a query")
	case u.Path == "" || u.Path == "/":
		return errors.New("a client_id URL must have a path")
	}
	for _, seg := range strings.Split(u.Path, "/") {
		if seg == "." || seg == ".." {
			return errors.New("a client_id URL must not have . or .. path segments")
		}
	}
	if !slices.Contains(f.hosts, strings.ToLower(u.Hostname())) {
		return fmt.Errorf("client ID metadata documents are fetched only from hosts the hub's operator allowed (--oauth-cimd-host); %s is not one", u.Hostname())
	}
	return nil
}

// fetch gets and checks one document; the duration is how long it may be
// cached (0: not at all).
func (f *cimdFetcher) fetch(ctx context.Context, clientID string) (*clientRec, time.Duration, error) {
	if err := f.checkURL(clientID); err != nil {
		return nil, 0, err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, clientID, nil)
	if err != nil {
		return nil, 0, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := f.hc.Do(req)
	if errors.Is(err, errCIMDRedirect) {
		return nil, 0, errors.New("the document's URL answered with a redirect; redirects are not followed (the client_id must be the document's own URL)")
	}
	if err != nil {
		return nil, 0, fmt.Errorf("the document could not be fetched: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, 0, fmt.Errorf("the document's URL answered %s", resp.Status)
	}
	if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "application/json" && !strings.HasSuffix(mt, "+json") {
		return nil, 0, fmt.Errorf("the document is %q, not JSON", cut(mt, 60))
	}
	if resp.ContentLength > cimdMaxBytes {
		return nil, 0, fmt.Errorf("the document is over %d bytes", cimdMaxBytes)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, cimdMaxBytes+1))
	if err != nil {
		return nil, 0, fmt.Errorf("the document could not be read: %w", err)
	}
	if len(body) > cimdMaxBytes {
		return nil, 0, fmt.Errorf("the document is over %d bytes", cimdMaxBytes)
	}
	var doc struct {
		registration
		ClientID string `json:"client_id"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return nil, 0, errors.New("the document is not a JSON client metadata object")
	}
	if doc.ClientID != clientID {
		return nil, 0, fmt.Errorf("the document's client_id %q is not its own URL", cut(doc.ClientID, 80))
	}
	name, redirects, err := f.s.checkMetadata(doc.registration)
	if err != nil {
		var oe *oauthErr
		if errors.As(err, &oe) {
			return nil, 0, fmt.Errorf("the document breaks the registration rules: %s", oe.desc)
		}
		return nil, 0, err
	}
	u, _ := url.Parse(clientID)
	return &clientRec{ID: clientID, Name: name, RedirectURIs: redirects, Host: u.Hostname()}, cacheTTL(resp.Header), nil
}

// cacheTTL is the document's max-age, at most a day; no-store (or
// no-cache) is not cached; nothing said is a few minutes.
func cacheTTL(h http.Header) time.Duration {
	cc := strings.ToLower(h.Get("Cache-Control"))
	if cc == "" {
		return cimdDefaultTTL
	}
	for _, d := range strings.Split(cc, ",") {
		d = strings.TrimSpace(d)
		if d == "no-store" || d == "no-cache" {
			return 0
		}
		if v, ok := strings.CutPrefix(d, "max-age="); ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return cimdDefaultTTL
			}
			return min(time.Duration(n)*time.Second, cimdMaxTTL)
		}
	}
	return cimdDefaultTTL
}

package cli

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"

	"github.com/roomrelay/roomrelay/internal/tlsfiles"
)

// Trusting a private CA: every command that talks to a hub (the agent,
// enroll, the admin commands) takes --ca-file, defaulting to
// ROOMRELAY_CA_FILE. This file is in both builds.

// caFileFlag adds --ca-file.
func caFileFlag(fs *flag.FlagSet, e *Env) *string {
	return fs.String("ca-file", e.Getenv("ROOMRELAY_CA_FILE"),
		"trust the CA certificate(s) in this PEM `file` for the hub's TLS, besides the system's (env ROOMRELAY_CA_FILE)")
}

// clientTLS is the TLS configuration trusting caFile; nil when caFile is
// empty. A CA file that does not load is a usage error.
func clientTLS(caFile string) (*tls.Config, error) {
	cfg, err := tlsfiles.ClientConfig(caFile)
	if err != nil {
		return nil, exitErr(ExitUsage, fmt.Errorf("--ca-file: %w", err))
	}
	return cfg, nil
}

// hubHTTPClient is the HTTP client for a hub trusting caFile; nil (the
// default client) when caFile is empty. A CA file that does not load is a
// usage error.
func hubHTTPClient(caFile string) (*http.Client, error) {
	hc, err := tlsfiles.HTTPClient(caFile)
	if err != nil {
		return nil, exitErr(ExitUsage, fmt.Errorf("--ca-file: %w", err))
	}
	return hc, nil
}

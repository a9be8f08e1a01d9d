package cli

import (
	"crypto/tls"
	"flag"
	"fmt"
	"net/http"
	"path/filepath"

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
// default client) when caFile is empty.
func hubHTTPClient(caFile string) (*http.Client, error) {
	cfg, err := clientTLS(caFile)
	if err != nil || cfg == nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg
	return &http.Client{Transport: tr}, nil
}

// absCAFile is caFile as recorded in the device config: absolute, because
// the service runs the agent from another directory.
func absCAFile(caFile string) (string, error) {
	if caFile == "" {
		return "", nil
	}
	abs, err := filepath.Abs(caFile)
	if err != nil {
		return "", fmt.Errorf("--ca-file: %w", err)
	}
	return abs, nil
}

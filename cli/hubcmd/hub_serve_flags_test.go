package hubcmd

import (
	"strings"
	"testing"

	"github.com/roomrelay/roomrelay/cli"
)

// TestHubTLSFlags: --tls-cert needs --tls-key, and --trusted-proxy takes
// CIDRs and bare IPs.
func TestHubTLSFlags(t *testing.T) {
	code, _, errs := run(t, nil, "hub", "--home", t.TempDir(), "--admin-token", "rra_t", "--tls-cert", "cert.pem")
	if code != cli.ExitUsage || !strings.Contains(errs, "--tls-cert and --tls-key together") {
		t.Fatalf("--tls-cert alone: %d %s", code, errs)
	}
	code, _, errs = run(t, nil, "hub", "--home", t.TempDir(), "--admin-token", "rra_t", "--trusted-proxy", "10.0.0.0/33")
	if code != cli.ExitUsage || !strings.Contains(errs, "trusted-proxy") {
		t.Fatalf("a bad --trusted-proxy: %d %s", code, errs)
	}
	for in, want := range map[string]string{"10.1.2.3": "10.1.2.3/32", "10.1.2.3/8": "10.0.0.0/8", "::1": "::1/128", "::ffff:127.0.0.1": "127.0.0.1/32"} {
		p, err := parsePrefix(in)
		if err != nil || p.String() != want {
			t.Errorf("parsePrefix(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	_, out, _ := run(t, nil, "hub", "--help")
	for _, f := range []string{"--tls-cert", "--tls-key", "--trusted-proxy", "--replicas", "--startup-timeout", "--nats-creds", "--nats-tls-ca", "--ca-file"} {
		if !strings.Contains(out, f) {
			t.Errorf("hub --help does not mention %s", f)
		}
	}
}

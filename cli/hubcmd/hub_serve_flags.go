package hubcmd

import (
	"crypto/tls"
	"flag"
	"fmt"
	"log/slog"
	"net/netip"
	"strings"
	"time"

	"github.com/roomrelay/roomrelay/cli"
	"github.com/roomrelay/roomrelay/internal/tlsfiles"
	"github.com/roomrelay/roomrelay/relay/hub"
)

// The hub server's flags for running it as a service: TLS, the NATS
// cluster it joins, and the proxies in front of it.

type hubServeFlags struct {
	tlsCert, tlsKey      *string
	replicas             *int
	storageMiB           *int64
	startupTimeout       *time.Duration
	natsCreds, natsTLSCA *string
	trusted              prefixList
}

func addHubServeFlags(fs *flag.FlagSet) *hubServeFlags {
	f := &hubServeFlags{
		tlsCert:  fs.String("tls-cert", "", "serve HTTPS with this PEM certificate `file` (with --tls-key; reloaded when it changes)"),
		tlsKey:   fs.String("tls-key", "", "the PEM private key `file` of --tls-cert"),
		replicas: fs.Int("replicas", 0, "replicas of every KV bucket and stream (0: 1 embedded, 3 with --nats); never lowered"),
		storageMiB: fs.Int64("storage-budget", hub.DefaultStorageBudget>>20,
			"`MiB` the hub reserves on each JetStream server for all its buckets and its events stream (each server's max_file_store must have room; docs/cluster.md)"),
		startupTimeout: fs.Duration("startup-timeout", 2*time.Minute, "how long to retry the first NATS connect and JetStream setup"),
		natsCreds:      fs.String("nats-creds", "", "NATS user credentials `file` for --nats"),
		natsTLSCA:      fs.String("nats-tls-ca", "", "CA `file` to verify the NATS servers' certificates"),
	}
	fs.Var(&f.trusted, "trusted-proxy", "believe X-Forwarded-For from peers in this `CIDR` (or IP); repeatable")
	return f
}

// apply puts the flags into cfg.
func (f *hubServeFlags) apply(cfg *hub.Config) error {
	if *f.replicas < 0 {
		return usagef("--replicas must be 0 (the default) or more")
	}
	if *f.startupTimeout < 0 {
		return usagef("--startup-timeout must not be negative")
	}
	if *f.storageMiB < hub.MinStorageBudget>>20 {
		return usagef("--storage-budget must be at least %d (MiB), not %d", hub.MinStorageBudget>>20, *f.storageMiB)
	}
	cfg.Replicas = *f.replicas
	cfg.StorageBudget = *f.storageMiB << 20
	cfg.StartupTimeout = *f.startupTimeout
	cfg.NATSCreds = *f.natsCreds
	cfg.NATSTLSCA = *f.natsTLSCA
	cfg.TrustedProxies = append([]netip.Prefix(nil), f.trusted...)
	return nil
}

// tls is the server's TLS configuration with a reloading certificate, or
// nil when neither --tls-cert nor --tls-key is given.
func (f *hubServeFlags) tls(log *slog.Logger) (*tls.Config, error) {
	if (*f.tlsCert == "") != (*f.tlsKey == "") {
		return nil, usagef("give --tls-cert and --tls-key together (or neither, for plain HTTP)")
	}
	if *f.tlsCert == "" {
		return nil, nil
	}
	r, err := tlsfiles.NewCertReloader(tlsfiles.ReloaderConfig{CertFile: *f.tlsCert, KeyFile: *f.tlsKey, Logger: log})
	if err != nil {
		return nil, exitErr(cli.ExitUsage, err)
	}
	return r.ServerConfig(), nil
}

// prefixList is a repeatable CIDR flag; a bare IP is its own /32 or /128.
type prefixList []netip.Prefix

func (l *prefixList) String() string {
	var s []string
	for _, p := range *l {
		s = append(s, p.String())
	}
	return strings.Join(s, ",")
}

func (l *prefixList) Set(v string) error {
	p, err := parsePrefix(v)
	if err != nil {
		return err
	}
	*l = append(*l, p)
	return nil
}

func parsePrefix(v string) (netip.Prefix, error) {
	v = strings.TrimSpace(v)
	if strings.Contains(v, "/") {
		p, err := netip.ParsePrefix(v)
		if err != nil {
			return netip.Prefix{}, fmt.Errorf("want a CIDR like 10.0.0.0/8 or an IP: %w", err)
		}
		if p.Addr().Is4In6() {
			return netip.Prefix{}, fmt.Errorf("%s: write IPv4 ranges as IPv4", v)
		}
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(v)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("want a CIDR like 10.0.0.0/8 or an IP: %w", err)
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}

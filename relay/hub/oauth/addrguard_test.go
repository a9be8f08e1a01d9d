package oauth

import (
	"net/netip"
	"strings"
	"testing"
)

// TestCIMDAddressGuard (#29.8): the CIMD fetch dials only global unicast
// addresses. The old guard (net.IP's loopback, private, link-local,
// unspecified and multicast tests) let 100.100.100.200 (carrier NAT, where
// Tailscale nodes and a cloud's metadata service live) and 64:ff9b::a00:1
// (NAT64 of 10.0.0.1) through, among others.
func TestCIMDAddressGuard(t *testing.T) {
	refused := map[string]string{
		"0.1.2.3":                "this network",
		"10.0.0.1":               "private",
		"100.64.0.1":             "carrier-grade NAT",
		"100.100.100.200":        "carrier-grade NAT",
		"127.0.0.1":              "loopback",
		"169.254.169.254":        "link-local",
		"172.16.5.4":             "private",
		"192.0.0.8":              "IETF protocol assignments",
		"192.0.0.170":            "IETF protocol assignments",
		"192.0.2.1":              "documentation",
		"192.31.196.1":           "AS112",
		"192.52.193.1":           "AMT",
		"192.88.99.1":            "6to4 relay",
		"192.168.1.1":            "private",
		"192.175.48.1":           "AS112",
		"198.18.0.1":             "benchmarking",
		"198.19.255.254":         "benchmarking",
		"198.51.100.7":           "documentation",
		"203.0.113.9":            "documentation",
		"224.0.0.251":            "multicast",
		"239.255.255.250":        "multicast",
		"240.0.0.1":              "reserved",
		"255.255.255.255":        "reserved",
		"::":                     "unspecified",
		"::1":                    "loopback",
		"::ffff:10.0.0.1":        "private",
		"::ffff:127.0.0.1":       "loopback",
		"::ffff:100.100.100.200": "carrier-grade NAT",
		"::ffff:169.254.169.254": "link-local",
		"::10.0.0.1":             "outside IPv6 global unicast",
		"64:ff9b::a00:1":         "NAT64",
		"64:ff9b::808:808":       "NAT64",
		"64:ff9b:1::a00:1":       "NAT64 local-use",
		"100::1":                 "discard-only",
		"2001::a00:1":            "Teredo",
		"2001:0:4136:e378::1":    "Teredo",
		"2001:2::1":              "IETF protocol assignments",
		"2001:20::1":             "IETF protocol assignments",
		"2001:db8::1":            "documentation",
		"2002:a00:1::1":          "6to4",
		"2002:808:808::1":        "6to4",
		"2620:4f:8000::1":        "AS112",
		"3fff::1":                "documentation",
		"5f00::1":                "SRv6",
		"fc00::1":                "unique local",
		"fd12:3456::1":           "unique local",
		"fe80::1":                "link-local",
		"fe80::1%eth0":           "link-local",
		"fec0::1":                "site-local",
		"ff02::1":                "multicast",
		"4000::1":                "outside IPv6 global unicast",
	}
	for s, want := range refused {
		why := publicAddr(netip.MustParseAddr(s))
		if why == "" || !strings.Contains(why, want) {
			t.Errorf("%s: %q, want refused as %s", s, why, want)
		}
	}
	for _, s := range []string{"8.8.8.8", "1.1.1.1", "100.63.255.255", "100.128.0.1", "172.32.0.1", "192.0.1.1", "198.17.255.255",
		"198.20.0.1", "223.255.255.254", "::ffff:8.8.8.8", "2606:4700:4700::1111", "2001:4860:4860::8888", "2a00:1450:4001::1", "2001:200::1"} {
		if why := publicAddr(netip.MustParseAddr(s)); why != "" {
			t.Errorf("%s: refused (%s), want allowed", s, why)
		}
	}
	// What the dialer sees: host:port strings.
	f := &cimdFetcher{}
	for _, addr := range []string{"100.100.100.200:443", "[64:ff9b::a00:1]:443", "[::ffff:10.0.0.1]:443"} {
		if err := f.checkAddr("tcp", addr, nil); err == nil {
			t.Errorf("checkAddr(%s) allowed it", addr)
		}
	}
	if err := f.checkAddr("tcp", "[2606:4700:4700::1111]:443", nil); err != nil {
		t.Errorf("checkAddr of a public address: %v", err)
	}
}

package oauth

import (
	"fmt"
	"net/netip"
)

// The addresses a client ID metadata document may be fetched from: global
// unicast only, and none of the IANA special-purpose ranges (the IPv4 and
// IPv6 Special-Purpose Address Registries, RFC 6890 and its updates),
// whether the registry calls them globally reachable or not: a range that
// embeds or translates to another address (NAT64, 6to4, Teredo, the
// IPv4-mapped form) can carry a private one, and the rest are no place a
// public client publishes a document. An IPv4-mapped IPv6 address is
// judged as the IPv4 address it is.

type specialRange struct {
	p    netip.Prefix
	name string
}

func ranges(rs ...string) []specialRange {
	out := make([]specialRange, 0, len(rs)/2)
	for i := 0; i < len(rs); i += 2 {
		out = append(out, specialRange{netip.MustParsePrefix(rs[i]), rs[i+1]})
	}
	return out
}

var specialV4 = ranges(
	"0.0.0.0/8", "this network (RFC 791)",
	"10.0.0.0/8", "private (RFC 1918)",
	"100.64.0.0/10", "shared address space, carrier-grade NAT (RFC 6598)",
	"127.0.0.0/8", "loopback (RFC 1122)",
	"169.254.0.0/16", "link-local (RFC 3927)",
	"172.16.0.0/12", "private (RFC 1918)",
	"192.0.0.0/24", "IETF protocol assignments (RFC 6890)",
	"192.0.2.0/24", "documentation TEST-NET-1 (RFC 5737)",
	"192.31.196.0/24", "AS112-v4 (RFC 7535)",
	"192.52.193.0/24", "AMT (RFC 7450)",
	"192.88.99.0/24", "6to4 relay anycast (RFC 7526)",
	"192.168.0.0/16", "private (RFC 1918)",
	"192.175.48.0/24", "direct delegation AS112 (RFC 7534)",
	"198.18.0.0/15", "benchmarking (RFC 2544)",
	"198.51.100.0/24", "documentation TEST-NET-2 (RFC 5737)",
	"203.0.113.0/24", "documentation TEST-NET-3 (RFC 5737)",
	"224.0.0.0/4", "multicast (RFC 5771)",
	"240.0.0.0/4", "reserved (RFC 1112)", // 255.255.255.255, limited broadcast, included
)

var specialV6 = ranges(
	"::/128", "unspecified (RFC 4291)",
	"::1/128", "loopback (RFC 4291)",
	"64:ff9b::/96", "NAT64 well-known prefix (RFC 6052)",
	"64:ff9b:1::/48", "NAT64 local-use prefix (RFC 8215)",
	"100::/64", "discard-only (RFC 6666)",
	"100:0:0:1::/64", "dummy prefix (RFC 9780)",
	"2001::/32", "Teredo (RFC 4380)",
	"2001::/23", "IETF protocol assignments (RFC 2928)", // benchmarking 2001:2::/48, ORCHID, AMT, AS112 inside
	"2001:db8::/32", "documentation (RFC 3849)",
	"2002::/16", "6to4 (RFC 3056)",
	"2620:4f:8000::/48", "direct delegation AS112 (RFC 7534)",
	"3fff::/20", "documentation (RFC 9637)",
	"5f00::/16", "SRv6 SIDs (RFC 9602)",
	"fc00::/7", "unique local (RFC 4193)",
	"fe80::/10", "link-local (RFC 4291)",
	"fec0::/10", "site-local, deprecated (RFC 3879)",
	"ff00::/8", "multicast (RFC 4291)",
)

// globalUnicast is the only IPv6 space allocated for global unicast
// (RFC 4291 §2.4); anything outside it is refused by default.
var globalUnicast = netip.MustParsePrefix("2000::/3")

// publicAddr says why a may not be fetched from ("" when it may).
func publicAddr(a netip.Addr) string {
	if !a.IsValid() {
		return "not an IP address"
	}
	a = a.WithZone("")
	if a.Is4In6() {
		a = a.Unmap()
	}
	table := specialV4
	if a.Is6() {
		table = specialV6
	}
	for _, r := range table {
		if r.p.Contains(a) {
			return fmt.Sprintf("%s is in %s, %s", a, r.p, r.name)
		}
	}
	if a.Is6() && !globalUnicast.Contains(a) {
		return fmt.Sprintf("%s is outside IPv6 global unicast %s", a, globalUnicast)
	}
	return ""
}

package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// errRefusedAddr is why a callback address is refused.
var errRefusedAddr = errors.New("not a public address (allow an internal one with the gateway's --pingback-allow)")

// addrGuard decides which addresses the gateway's callbacks may reach:
// public unicast addresses, and the hosts and networks the operator allows
// on purpose. Loopback, private (RFC 1918, RFC 4193), carrier-grade NAT,
// link-local (169.254.169.254, the cloud metadata address, among them),
// multicast, unspecified and this host's own addresses (where its
// listeners are) are refused, whatever name leads there.
type addrGuard struct {
	allowHosts map[string]bool
	allowNets  []netip.Prefix
	own        map[netip.Addr]bool
	resolve    func(ctx context.Context, host string) ([]netip.Addr, error)
}

// nonPublic are ranges IsGlobalUnicast does not exclude that no callback
// of a caller's has a reason to reach.
// The ranges are IANA's special-purpose address registries' entries that
// are not globally reachable (iana.org/assignments/iana-ipv4-special-registry,
// iana-ipv6-special-registry), and the prefixes that carry an IPv4
// address inside an IPv6 one.
var nonPublic = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network", RFC 791
	netip.MustParsePrefix("100.64.0.0/10"),   // carrier-grade NAT, RFC 6598
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments, RFC 6890
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation, RFC 5737
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking, RFC 2544
	netip.MustParsePrefix("198.51.100.0/24"), // documentation, RFC 5737
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation, RFC 5737
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, RFC 1112
	netip.MustParsePrefix("::/96"),           // IPv4-compatible, RFC 4291: reaches IPv4 inside
	netip.MustParsePrefix("64:ff9b::/96"),    // NAT64: reaches IPv4 inside
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use NAT64, RFC 8215: reaches IPv4 inside
	netip.MustParsePrefix("100::/64"),        // discard-only, RFC 6666
	netip.MustParsePrefix("2001::/23"),       // IETF protocol assignments (Teredo, which reaches IPv4, among them), RFC 2928
	netip.MustParsePrefix("2001:db8::/32"),   // documentation, RFC 3849
	netip.MustParsePrefix("2002::/16"),       // 6to4: reaches IPv4 inside
	netip.MustParsePrefix("3fff::/20"),       // documentation, RFC 9637
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs, RFC 9602
	netip.MustParsePrefix("fec0::/10"),       // site-local, RFC 3879: private in all but name
}

func newAddrGuard(p Pingback) (*addrGuard, error) {
	g := &addrGuard{allowHosts: map[string]bool{}, own: map[netip.Addr]bool{}, resolve: p.Resolve}
	for _, a := range p.Allow {
		a = strings.TrimSpace(a)
		if pfx, err := netip.ParsePrefix(a); err == nil {
			g.allowNets = append(g.allowNets, pfx.Masked())
			continue
		}
		if ip, err := netip.ParseAddr(a); err == nil {
			g.allowNets = append(g.allowNets, netip.PrefixFrom(ip.Unmap(), ip.Unmap().BitLen()))
			continue
		}
		if a == "" || strings.ContainsAny(a, "/:[] ") {
			return nil, fmt.Errorf("Pingback.Allow %q: want a host name, an address or a CIDR network", a)
		}
		g.allowHosts[strings.ToLower(strings.TrimSuffix(a, "."))] = true
	}
	if g.resolve == nil {
		g.resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if pfx, err := netip.ParsePrefix(a.String()); err == nil {
				g.own[pfx.Addr().Unmap()] = true
			}
		}
	}
	return g, nil
}

// allowedIP reports whether a callback may connect to ip.
func (g *addrGuard) allowedIP(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, n := range g.allowNets {
		if n.Contains(ip) {
			return true
		}
	}
	if !ip.IsGlobalUnicast() || ip.IsPrivate() || g.own[ip] {
		return false
	}
	for _, n := range nonPublic {
		if n.Contains(ip) {
			return false
		}
	}
	return true
}

// check resolves the host of a callback URL and says why it is refused,
// nil when every address it resolves to is allowed (or the host is
// allowed by name). in.php calls it, so that a refused address is the
// caller's answer there and then; the dialer checks again at connect time.
func (g *addrGuard) check(ctx context.Context, u *url.URL) error {
	host := strings.ToLower(strings.TrimSuffix(u.Hostname(), "."))
	if g.allowHosts[host] {
		return nil
	}
	if ip, err := netip.ParseAddr(host); err == nil {
		if !g.allowedIP(ip) {
			return fmt.Errorf("address %s: %w", ip, errRefusedAddr)
		}
		return nil
	}
	ips, err := g.resolve(ctx, host)
	if err != nil || len(ips) == 0 {
		return fmt.Errorf("host %s does not resolve", host)
	}
	for _, ip := range ips {
		if !g.allowedIP(ip) {
			return fmt.Errorf("host %s resolves to %s: %w", host, ip.Unmap(), errRefusedAddr)
		}
	}
	return nil
}

// dial connects to addr (host:port) only at an allowed address: it
// resolves the name itself and connects to the address it checked, so a
// name that resolves elsewhere between in.php's check and the call
// (DNS rebinding) is refused; the socket's Control checks the address
// actually connected to once more.
func (g *addrGuard) dial(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	byName := g.allowHosts[strings.ToLower(strings.TrimSuffix(host, "."))]
	var ips []netip.Addr
	if ip, err := netip.ParseAddr(host); err == nil {
		ips = []netip.Addr{ip}
	} else if ips, err = g.resolve(ctx, host); err != nil {
		return nil, err
	}
	d := &net.Dialer{Timeout: 10 * time.Second, Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil || (!byName && !g.allowedIP(ap.Addr())) {
			return fmt.Errorf("callback to %s: %w", address, errRefusedAddr)
		}
		return nil
	}}
	var last error = fmt.Errorf("callback host %s: no address", host)
	for _, ip := range ips {
		if !byName && !g.allowedIP(ip) {
			last = fmt.Errorf("callback host %s at %s: %w", host, ip.Unmap(), errRefusedAddr)
			continue
		}
		c, err := d.DialContext(ctx, network, net.JoinHostPort(ip.Unmap().String(), port))
		if err == nil {
			return c, nil
		}
		last = err
	}
	return nil, last
}

// client is the HTTP client of the callbacks: connections through dial
// only, no proxy from the environment (which would connect for it), and
// no redirect followed. A callback is a notification to the URL the
// caller named; following a redirect would let an outside address send
// captchaq's request to an inside one, and no caller needs it, so a 3xx
// is a failed call like any other non-2xx.
func (g *addrGuard) client() *http.Client {
	return &http.Client{
		Transport: &http.Transport{
			Proxy:                 nil,
			DialContext:           g.dial,
			TLSHandshakeTimeout:   10 * time.Second,
			ResponseHeaderTimeout: 10 * time.Second,
			MaxIdleConnsPerHost:   2,
			IdleConnTimeout:       30 * time.Second,
		},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

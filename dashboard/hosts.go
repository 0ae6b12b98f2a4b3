package dashboard

import (
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strings"
)

// HostsOf returns the Hosts a dashboard listening on addr (host:port, as
// the listener reports it) answers to: that address; localhost too when it
// is a loopback address; any IP address on its port when it listens on all
// of them (0.0.0.0 or [::]); and the names given, each a host name (any
// port) or host:port. A name resolves to whatever its owner says, so only
// the names given are trusted; an IP address cannot be rebound.
func HostsOf(addr string, names ...string) []string {
	out := []string{addr}
	if host, port, err := net.SplitHostPort(addr); err == nil {
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsLoopback() {
			out = append(out, net.JoinHostPort("localhost", port))
		}
		if host == "localhost" {
			out = append(out, net.JoinHostPort("127.0.0.1", port), net.JoinHostPort("::1", port))
		}
	}
	return append(out, names...)
}

// allowedHost is one entry of Config.Hosts, split.
type allowedHost struct {
	host  string // canonical; empty with anyIP
	port  string // empty: any port
	anyIP bool   // listening on every address: any IP literal is this host
}

func parseHosts(entries []string) ([]allowedHost, error) {
	if len(entries) == 0 {
		return nil, fmt.Errorf("dashboard: no Hosts: give at least its listen address (HostsOf)")
	}
	var out []allowedHost
	for _, e := range entries {
		if e == "" || strings.ContainsAny(e, "/@?# ") {
			return nil, fmt.Errorf("dashboard: host %q: want a host name or host:port, without scheme or path", e)
		}
		host, port := splitHost(e)
		if host == "" {
			host, port = splitHost("0.0.0.0" + e) // ":8080"
		}
		a := allowedHost{host: host, port: port}
		if ip, err := netip.ParseAddr(host); err == nil && ip.IsUnspecified() {
			a = allowedHost{port: port, anyIP: true}
		}
		out = append(out, a)
	}
	return out, nil
}

// splitHost splits a Host header or an entry into a canonical host (lower
// case, no trailing dot, an IP address in its standard form) and its port
// (empty when none).
func splitHost(h string) (host, port string) {
	host = h
	if hh, p, err := net.SplitHostPort(h); err == nil {
		host, port = hh, p
	}
	host = strings.TrimSuffix(strings.ToLower(strings.Trim(host, "[]")), ".")
	if ip, err := netip.ParseAddr(host); err == nil {
		host = ip.Unmap().String()
	}
	return host, port
}

// hostAllowed says whether a request's Host (or an Origin's host) is one
// this dashboard serves.
func (d *Dashboard) hostAllowed(h string) bool {
	host, port := splitHost(h)
	if host == "" {
		return false
	}
	_, ipErr := netip.ParseAddr(host)
	for _, a := range d.hosts {
		if a.port != "" && a.port != port {
			continue
		}
		if a.anyIP && ipErr == nil || !a.anyIP && a.host == host {
			return true
		}
	}
	return false
}

// originAllowed says whether a change may come from a page of origin o: a
// page of one of this dashboard's Hosts, over HTTP or HTTPS.
func (d *Dashboard) originAllowed(o string) bool {
	u, err := url.Parse(o)
	return err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Host != "" && d.hostAllowed(u.Host)
}

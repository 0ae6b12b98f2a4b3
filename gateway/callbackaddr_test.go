package gateway_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/stream"
)

// fakeDNS answers the test's own names and asks the system resolver for
// the rest (localhost among them); rebind.test answers a public address
// to its first question and 127.0.0.1 to every later one.
type fakeDNS struct {
	rebindAsked atomic.Int32
	names       map[string][]netip.Addr
}

func (d *fakeDNS) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	if host == "rebind.test" {
		if d.rebindAsked.Add(1) == 1 {
			return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
		}
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	if a, ok := d.names[host]; ok {
		return a, nil
	}
	return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
}

// hits counts the requests a receiver on 127.0.0.1 gets.
type hits struct {
	mu    sync.Mutex
	paths []string
}

func (h *hits) count() int { h.mu.Lock(); defer h.mu.Unlock(); return len(h.paths) }

func receiver(t *testing.T, handler func(w http.ResponseWriter, r *http.Request)) (*hits, *url.URL) {
	h := &hits{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.mu.Lock()
		h.paths = append(h.paths, r.URL.Path)
		h.mu.Unlock()
		handler(w, r)
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	return h, u
}

// Each class of address a caller may name as its pingback that is not a
// public unicast address is refused at in.php with ERROR_BAD_PARAMETERS
// naming the pingback, and no task is submitted; a name that resolves to
// one (localhost) is refused like the address.
func TestPingbackAddressesRefusedAtSubmit(t *testing.T) {
	t.Parallel()
	dns := &fakeDNS{names: map[string][]netip.Addr{
		"metadata.test": {netip.MustParseAddr("169.254.169.254")},
		"mixed.test":    {netip.MustParseAddr("93.184.215.14"), netip.MustParseAddr("10.1.2.3")},
	}}
	b := setup(t, func(c *gateway.Config) { c.Pingback = gateway.Pingback{Resolve: dns.resolve} })
	own := ""
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if p, err := netip.ParsePrefix(a.String()); err == nil && p.Addr().IsGlobalUnicast() && !p.Addr().IsPrivate() {
				own = "http://" + net.JoinHostPort(p.Addr().String(), "8090") + "/"
				break
			}
		}
	}
	cases := map[string]string{
		"loopback":                 "http://127.0.0.1:4222/",
		"loopback, other":          "http://127.3.4.5/hook",
		"localhost":                "http://localhost:8090/hook",
		"loopback v6":              "http://[::1]:8090/",
		"v4-mapped loopback":       "http://[::ffff:127.0.0.1]/",
		"link-local metadata":      "http://169.254.169.254/latest/meta-data/",
		"name of the metadata":     "http://metadata.test/",
		"private 10/8":             "http://10.0.0.1/",
		"private 172.16/12":        "http://172.16.5.4/",
		"private 192.168/16":       "https://192.168.1.1/",
		"unique local v6":          "http://[fd00::1]/",
		"link-local v6":            "http://[fe80::1]/",
		"carrier-grade NAT":        "http://100.64.0.1/",
		"multicast":                "http://224.0.0.1/",
		"multicast v6":             "http://[ff02::1]/",
		"unspecified":              "http://0.0.0.0:4222/",
		"unspecified v6":           "http://[::]:8090/",
		"broadcast":                "http://255.255.255.255/",
		"one private among public": "http://mixed.test/",
		"unresolvable":             "http://nowhere.invalid/",
	}
	if own != "" {
		cases["this host's own address"] = own
	}
	for name, hook := range cases {
		out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", hook, "json", "1"}, turnstile...)...)
		require.Contains(t, out, `"request":"ERROR_BAD_PARAMETERS"`, "%s: %s", name, hook)
		require.Contains(t, out, "pingback", name)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	tasks, err := b.env.Client.Tasks(ctx, stream.TaskFilter{})
	require.NoError(t, err)
	require.Empty(t, tasks, "no task of a refused pingback was submitted")
	require.Zero(t, b.env.Emulator.Stats().Submitted, "nothing paid")
}

// An internal host the operator allows, by name or by network, is called
// back; a redirect from it is not followed (not even to an address that
// is allowed), and counts as a failed call.
func TestPingbackAllowedAndRedirectsNotFollowed(t *testing.T) {
	t.Parallel()
	inner, innerURL := receiver(t, func(w http.ResponseWriter, r *http.Request) {})
	outer, outerURL := receiver(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "http://"+innerURL.Host+"/inside", http.StatusFound)
		}
	})
	dns := &fakeDNS{names: map[string][]netip.Addr{"hooks.test": {netip.MustParseAddr("127.0.0.1")}}}
	b := setup(t, func(c *gateway.Config) {
		c.Pingback = gateway.Pingback{Resolve: dns.resolve, Allow: []string{"hooks.test", "127.0.0.0/8"}, Attempts: 2, Backoff: 5 * time.Millisecond}
	})
	for _, hook := range []string{"http://hooks.test:" + outerURL.Port() + "/ok", "http://hooks.test:" + outerURL.Port() + "/moved"} {
		out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", hook}, turnstile...)...)
		require.True(t, strings.HasPrefix(out, "OK|"), out)
	}
	require.Eventually(t, func() bool { return outer.count() == 3 }, 30*time.Second, 10*time.Millisecond,
		"one call to /ok, two to /moved (the redirect is a failed call)")
	require.Zero(t, inner.count(), "the redirect's target was never called")
}

// A name that resolves to a public address when in.php checks it and to
// 127.0.0.1 when the callback connects (DNS rebinding) is never connected
// to: the callback resolves and checks the address it connects to.
func TestPingbackRebindingRefusedAtConnect(t *testing.T) {
	t.Parallel()
	got, hookURL := receiver(t, func(w http.ResponseWriter, r *http.Request) {})
	dns := &fakeDNS{}
	b := setup(t, func(c *gateway.Config) {
		c.Pingback = gateway.Pingback{Resolve: dns.resolve, Attempts: 3, Backoff: 5 * time.Millisecond}
	})
	out := b.call(t, "in.php", append([]string{"key", alice.Key, "pingback", "http://rebind.test:" + hookURL.Port() + "/hook"}, turnstile...)...)
	require.True(t, strings.HasPrefix(out, "OK|"), "checked at in.php, the name is public: %s", out)
	require.Eventually(t, func() bool { return dns.rebindAsked.Load() == 4 }, 30*time.Second, 10*time.Millisecond,
		"in.php's check, then each of the 3 attempts resolved the name again")
	id := strings.TrimPrefix(out, "OK|")
	require.True(t, strings.HasPrefix(b.await(t, alice, id), "OK|"), "the task itself is answered at res.php")
	require.Zero(t, got.count(), "the rebound address was never connected to")
}

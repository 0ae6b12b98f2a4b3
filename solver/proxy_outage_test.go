package solver_test

import (
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// TestProxyDownIsAnOutage: the HTTP(S) proxy the service is reached through
// refuses the connection. No request left the machine, so no captcha can
// have been paid: UNREACHABLE (a capacity wait, no attempt spent), naming
// the proxy, as when the service itself refuses, not NETWORK "in.php's
// reply was lost: the captcha it submitted may have been paid", which spent
// an attempt per try and sent every task of a run to the dead letter.
func TestProxyDownIsAnOutage(t *testing.T) {
	t.Parallel()
	emu := fakeapi.New(fakeapi.Config{})
	api := httptest.NewServer(emu)
	defer api.Close()
	proxy := httptest.NewServer(http.NotFoundHandler())
	proxyURL, err := url.Parse(proxy.URL)
	if err != nil {
		t.Fatal(err)
	}
	proxy.Close() // nothing listens there now
	hc := &http.Client{Transport: &http.Transport{Proxy: http.ProxyURL(proxyURL)}}
	c, err := solver.NewClient(solver.Config{BaseURL: api.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, HTTPClient: hc})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Solve(ctxT(t), turnstile("https://a.example/"))
	if solver.CodeOf(err) != solver.CodeUnreachable || solver.ClassOf(err) != retry.Capacity {
		t.Errorf("Solve through a proxy that refuses: %v, want UNREACHABLE (capacity)", err)
	}
	if err != nil && (!strings.Contains(err.Error(), "proxy") || strings.Contains(err.Error(), "may have been paid")) {
		t.Errorf("error %q: want the proxy named, and nothing said paid", err)
	}
	if n := emu.Stats().Submitted; n != 0 {
		t.Errorf("the service was paid for %d captchas", n)
	}
}

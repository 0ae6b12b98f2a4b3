package dashboard

import (
	"encoding/base64"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// A page served from another name that resolves to the dashboard (DNS
// rebinding) is refused on every route: the page, its assets, the reads,
// the event stream, the token's entry and the changes. Its own address and
// the names it was given still work.
func TestForeignHostRefused(t *testing.T) {
	b := setup(t)
	_, port, err := net.SplitHostPort(strings.TrimPrefix(b.web.URL, "http://"))
	require.NoError(t, err)
	foreign := "rebind.evil.example:" + port

	do := func(base *httptest.Server, method, path, host string, hdr map[string]string) (int, http.Header, string) {
		req, err := http.NewRequest(method, base.URL+path, strings.NewReader(`{"lane":"slow","action":"pause"}`))
		require.NoError(t, err)
		req.Host = host
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body := make([]byte, 4096)
		n, _ := io.ReadFull(resp.Body, body)
		return resp.StatusCode, resp.Header, string(body[:n])
	}
	csrf := func(base *httptest.Server, host string) string {
		_, _, page := do(base, http.MethodGet, "/", host, nil)
		return between(page, `<meta name="csrf" content="`, `"`)
	}

	for _, path := range []string{"/", "/static/app.js", "/api/snapshot", "/api/events", "/api/task?id=x", "/api/tasks", "/api/outcomes", "/api/dead", "/api/history"} {
		code, _, body := do(b.web, http.MethodGet, path, foreign, nil)
		require.Equal(t, http.StatusMisdirectedRequest, code, "GET %s with Host %s: %s", path, foreign, body)
		require.NotContains(t, body, "csrf", path)
	}

	// A change from the rebound page: its Origin is its own name, the same
	// as the Host it sends. The page token it would need is not served to
	// it either, so take the real one.
	token := csrf(b.web, b.web.Listener.Addr().String())
	require.NotEmpty(t, token)
	hdr := map[string]string{"Content-Type": "application/json", "X-Captchaq-CSRF": token, "Origin": "http://" + foreign,
		"Authorization": "Basic " + basic("admin", passwords["admin"])}
	for _, path := range []string{"/api/lane", "/api/signin", "/api/cancel", "/api/replay", "/api/purge", "/api/delete"} {
		code, _, body := do(b.web, http.MethodPost, path, foreign, hdr)
		require.Equal(t, http.StatusMisdirectedRequest, code, "POST %s with Host %s: %s", path, foreign, body)
	}
	// The same change with the dashboard's own Host but the foreign Origin.
	code, _, body := do(b.web, http.MethodPost, "/api/lane", b.web.Listener.Addr().String(), hdr)
	require.Equal(t, http.StatusForbidden, code, body)
	require.Contains(t, body, "another site")
	st, err := b.admin.Stats(testContext(t), 0)
	require.NoError(t, err)
	for _, q := range st.Queues {
		require.False(t, q.Paused, "lane %s paused by a foreign page", q.Lane)
	}

	// The token's entry: a foreign Host gets neither the page nor the
	// cookie, even with the right token.
	tok := tokenServer(t, b, "dash-token-123")
	_, tport, _ := net.SplitHostPort(tok.Listener.Addr().String())
	code, h, _ := do(tok, http.MethodGet, "/?token=dash-token-123", "rebind.evil.example:"+tport, nil)
	require.Equal(t, http.StatusMisdirectedRequest, code)
	require.Empty(t, h.Values("Set-Cookie"))

	// Its own names still work: the listen address, localhost for a
	// loopback listener, and a name it was given.
	for _, host := range []string{tok.Listener.Addr().String(), "localhost:" + tport, "dash.example.org:" + tport} {
		code, h, _ := do(tok, http.MethodGet, "/?token=dash-token-123", host, nil)
		require.Equal(t, http.StatusOK, code, host)
		require.NotEmpty(t, h.Values("Set-Cookie"), host)
	}
}

func basic(user, password string) string {
	return base64.StdEncoding.EncodeToString([]byte(user + ":" + password))
}

// tokenServer is a second dashboard on the same stream that wants a token
// and also answers to dash.example.org.
func tokenServer(t *testing.T, b *bundle, token string) *httptest.Server {
	t.Helper()
	srv := httptest.NewUnstartedServer(nil)
	d, err := New(Config{Client: b.client, Token: token, Hosts: HostsOf(srv.Listener.Addr().String(), "dash.example.org")})
	require.NoError(t, err)
	srv.Config.Handler = d
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// Which Hosts a dashboard answers to, by where it listens and the names it
// was given.
func TestHostsOf(t *testing.T) {
	t.Parallel()
	cases := []struct {
		listen string
		names  []string
		ok     []string
		refuse []string
	}{
		{listen: "127.0.0.1:8080",
			ok:     []string{"127.0.0.1:8080", "localhost:8080", "LOCALHOST:8080", "localhost.:8080"},
			refuse: []string{"127.0.0.1:9090", "localhost:9090", "evil.example:8080", "127.0.0.1.evil.example:8080", "", "[::1]:8080", "10.0.0.5:8080"}},
		{listen: "[::1]:8080",
			ok:     []string{"[::1]:8080", "localhost:8080"},
			refuse: []string{"127.0.0.1:8080", "evil.example:8080"}},
		{listen: "0.0.0.0:8080", names: []string{"dash.example.org", "proxy.example:443"},
			ok:     []string{"10.0.0.5:8080", "[fe80::1]:8080", "dash.example.org", "dash.example.org:8080", "Dash.Example.Org:443", "proxy.example:443"},
			refuse: []string{"10.0.0.5:9090", "localhost:8080", "evil.example:8080", "proxy.example:8080", "proxy.example", "sub.dash.example.org"}},
	}
	for _, c := range cases {
		hosts, err := parseHosts(HostsOf(c.listen, c.names...))
		require.NoError(t, err)
		d := &Dashboard{hosts: hosts}
		for _, h := range c.ok {
			require.True(t, d.hostAllowed(h), "listening on %s %v: %q should be served", c.listen, c.names, h)
		}
		for _, h := range c.refuse {
			require.False(t, d.hostAllowed(h), "listening on %s %v: %q should be refused", c.listen, c.names, h)
		}
	}
	require.True(t, (&Dashboard{hosts: must(parseHosts([]string{"127.0.0.1:8080"}))}).originAllowed("http://127.0.0.1:8080"))
	for _, o := range []string{"null", "http://evil.example:8080", "file://127.0.0.1:8080", "http://127.0.0.1:9090"} {
		require.False(t, (&Dashboard{hosts: must(parseHosts([]string{"127.0.0.1:8080"}))}).originAllowed(o), o)
	}
	for _, bad := range [][]string{nil, {""}, {"http://dash.example"}, {"dash.example/x"}} {
		_, err := parseHosts(bad)
		require.Error(t, err, "%q", bad)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// The page loads nothing from elsewhere: every asset is embedded, and no
// asset names another site (the SVG namespace is a name, not a fetch).
func TestAssetsAreLocal(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"static/index.html", "static/app.js", "static/style.css"} {
		b, err := static.ReadFile(name)
		require.NoError(t, err)
		s := strings.ReplaceAll(string(b), "http://www.w3.org/2000/svg", "")
		for _, bad := range []string{"http://", "https://", "//cdn", "@import", "url("} {
			require.NotContains(t, s, bad, "%s", name)
		}
	}
}

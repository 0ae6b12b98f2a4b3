package dashboard

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// On a trial server (no users) the page says that any name signs in, and
// so does the sign-in's reply, instead of taking any name silently. The
// page comes with its first snapshot: the queues show before any
// server-sent event arrives (here none ever does).
func TestTrialServerSignInAndFirstSnapshot(t *testing.T) {
	ns, _, c := trialServer(t)
	ctx := testContext(t)
	_, err := c.SubmitAll(ctx, []stream.Task{turnstile("t1", "https://shop.example/"), turnstile("t2", "https://shop.example/")}) // no worker: they wait
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		st, err := c.Stats(ctx, time.Hour)
		return err == nil && st.Queued == 2
	}, 10*time.Second, 10*time.Millisecond)

	web := httptest.NewUnstartedServer(nil)
	d, err := New(Config{Client: c, Hosts: HostsOf(web.Listener.Addr().String()),
		Connect: func(ctx context.Context, user, password string) (*nats.Conn, error) {
			return nats.Connect(ns.ClientURL(), nats.UserInfo(user, password))
		}})
	require.NoError(t, err)
	web.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/events" { // no event ever comes
			<-r.Context().Done()
			return
		}
		d.ServeHTTP(w, r)
	})
	web.Start()
	t.Cleanup(web.Close)

	resp, err := http.Get(web.URL + "/")
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	page := string(b)
	require.Contains(t, page, `<meta name="no-users" content="true">`)
	var first Snapshot
	require.NoError(t, json.Unmarshal([]byte(between(page, `<script type="application/json" id="first-snapshot">`, `</script>`)), &first), page)
	require.Equal(t, uint64(2), first.Stats.Queued, "the page's own snapshot")

	// A sign-in with any name passes, and says why.
	req, err := http.NewRequest(http.MethodPost, web.URL+"/api/signin", strings.NewReader("{}"))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Captchaq-CSRF", between(page, `<meta name="csrf" content="`, `"`))
	req.SetBasicAuth("anyone", "anything")
	resp, err = http.DefaultClient.Do(req)
	require.NoError(t, err)
	var out map[string]string
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode, out)
	require.Contains(t, out["ok"], "this NATS server has no users (a local trial): any name signs in with every permission, no password is checked")

	// In the browser: the queues at once, the warning before sign-in, and
	// the sign-in's reply.
	br, problems := browser(t)
	require.NoError(t, chromedp.Do(br, chromedp.Navigate(web.URL), waitText(`#queues tr[data-lane="fast"][data-priority="normal"]`, "2")))
	require.Contains(t, text(t, br, `#live`), "as of ", "not connecting…: the first snapshot came with the page")
	require.Contains(t, text(t, br, `#who`), "this server has no users (a local trial): any name signs in, no password is checked")
	require.NoError(t, chromedp.Do(br, chromedp.SetValue(`#user`, "anyone"), chromedp.SetValue(`#password`, "x"),
		chromedp.Click(`#signin-button`), waitText(`#notice-msg`, "signed in as NATS user anyone: this NATS server has no users")))
	require.Empty(t, problems(), "no console errors")
}

// trialServer starts a server without users, as `captchaq server --config
// ”` does, with the queue's topology, and returns it, a connection to it
// and a client on that connection.
func trialServer(t *testing.T) (*server.Server, *nats.Conn, *stream.Client) {
	t.Helper()
	ns, err := broker.Start(broker.Config{Listen: true, Port: -1, StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	ctx := testContext(t)
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	_, err = stream.EnsureTopology(ctx, nc, stream.Topology{}, true)
	require.NoError(t, err)
	c, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "trial-test"})
	require.NoError(t, err)
	return ns, nc, c
}

// On a server with users the page says nothing of the kind.
func TestServerWithUsersSaysNothingOfTrial(t *testing.T) {
	b := setup(t)
	c := newClient(t, b)
	resp, err := http.Get(b.web.URL + "/")
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Contains(t, string(page), `<meta name="no-users" content="false">`)
	code, out := c.post("/api/signin", "{}")
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "signed in: the admin's permissions are checked", out["ok"])
}

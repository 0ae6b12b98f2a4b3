package solver_test

import (
	"github.com/captchaq/captchaq/retry"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/faultproxy"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// The client's clock moves an hour back while the service refuses
// connections: once the service is back, the probe schedule and the
// submission limiter still go by the time that really passed, so the
// next submission goes through within seconds, not an hour later. Paid
// once.
func TestClockBackDuringOutageResumesSubmissions(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	var clk clock
	c, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr(), APIKey: fakeapi.TestKey, Now: clk.now})
	require.NoError(t, err)

	// One submission before: the limiter has spaced the next from it.
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.NoError(t, err)
	require.Equal(t, 1, api.Stats().Submitted)

	proxy.Refuse()
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
	clk.move(-time.Hour)
	require.NoError(t, proxy.Restore())

	start := time.Now()
	require.Eventually(t, func() bool { return c.Probe(ctxT(t)) }, 10*time.Second, 50*time.Millisecond,
		"no probe found the service back: the probe waits for the hour the clock went back")
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.NoError(t, err)
	require.Less(t, time.Since(start), 10*time.Second, "the submission waited for the clock, not for the service")
	st := api.Stats()
	require.Equal(t, 2, st.Submitted, "paid once for each submission that went through")
	require.Equal(t, 2, st.InCalls, "the refused call never reached the service: %+v", st)
}

// in.php answers HTTP 503 every time while res.php answers: the service
// takes no captcha, and a run of 5xx from in.php is an outage of
// submissions even though the polls of the captchas it holds get replies
// between them. From the third on, a submission is a capacity wait (no
// attempt spent), not a transient failure that spends the task's attempt
// each time. Nothing is paid.
func TestServerErrorsOnlyOnInPHPSpendNoAttempt(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			http.Error(w, "<html><body>503 Service Temporarily Unavailable</body></html>", http.StatusServiceUnavailable)
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1})
	require.NoError(t, err)
	var classes []string
	for range 6 {
		_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
		require.Error(t, err)
		classes = append(classes, solver.ClassOf(err).String())
		// A poll of a captcha the service holds gets its reply between.
		_, ferr := c.Fetch(ctxT(t), "1234567")
		require.NotEqual(t, retry.Transient, solver.ClassOf(ferr), "%v", ferr)
	}
	for i, cl := range classes[2:] {
		require.Equal(t, retry.Capacity.String(), cl, "submission %d of %v", i+3, classes)
	}
	require.Zero(t, api.Stats().Submitted, "nothing paid")
}

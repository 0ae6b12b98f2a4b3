package solver_test

import (
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A front (a load balancer, a CDN) passes each in.php call to the service,
// which takes the captcha and is paid, and answers the caller a 502, 503
// or 504 page in place of the service's reply, while res.php answers: each
// submission may have been paid, and says so. One the front held past
// StallAfter/5 (a gateway timeout), once the service answers other calls,
// is a reply lost that spends the task's attempt, as a late reply does;
// the first of the run (nothing else answered since it began), and one
// the front answered at once, are the outage's: a capacity wait. As a
// capacity wait every time, a task was submitted, and paid, again after
// every probe until its deadline.
func TestGatewayErrorsOnInPHPMayHaveBeenPaid(t *testing.T) {
	t.Parallel()
	for _, status := range []int{http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout} {
		for name, hold := range map[string]time.Duration{"held": 500 * time.Millisecond, "at-once": 0} {
			t.Run(strconv.Itoa(status)+"-"+name, func(t *testing.T) {
				t.Parallel()
				api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
				srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
					if r.URL.Path == "/in.php" {
						api.ServeHTTP(httptest.NewRecorder(), r) // taken, and paid
						time.Sleep(hold)                         //nolint:forbidigo // the front's wait for the origin is the test's input
						http.Error(w, "<html><body><h1>"+strconv.Itoa(status)+" "+http.StatusText(status)+"</h1>nginx</body></html>", status)
						return
					}
					api.ServeHTTP(w, r)
				}))
				t.Cleanup(srv.Close)
				c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
					StallAfter: 2 * time.Second}) // a call is held from 400 ms on
				require.NoError(t, err)
				const n = 6
				for i := range n {
					_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
					require.Equal(t, solver.HTTPCode(status), solver.CodeOf(err), "submission %d: %v", i+1, err)
					require.True(t, solver.MayBePaid(err), "submission %d: %v", i+1, err)
					want := retry.Transient
					if i == 0 || hold == 0 {
						want = retry.Capacity
					}
					require.Equal(t, want, solver.ClassOf(err), "submission %d: %v", i+1, err)
					// A poll of a captcha the service holds gets its reply between.
					_, ferr := c.Fetch(ctxT(t), "1234567")
					require.NotEqual(t, retry.Transient, solver.ClassOf(ferr), "%v", ferr)
				}
				st := api.Stats()
				require.Equal(t, n, st.Submitted, "each call that may have paid did, and each told its caller so")
				require.Equal(t, n, st.InCalls)
			})
		}
	}
}

// The whole service fails behind its front (every call 502, polls too):
// the in.php calls sent into it may have been paid, and say so, but they
// are the outage's, a capacity wait that spends no attempt; from the
// third 5xx in a row nothing is submitted.
func TestWholeFrontDownMayHaveBeenPaidWithoutAttempts(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	var inCalls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			inCalls.Add(1)
			api.ServeHTTP(httptest.NewRecorder(), r)
		}
		http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway)
	}))
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1})
	require.NoError(t, err)
	for i := range 2 {
		_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
		require.True(t, solver.MayBePaid(err), "submission %d: %v", i+1, err)
		require.Equal(t, retry.Capacity, solver.ClassOf(err), "submission %d: %v", i+1, err)
		_, ferr := c.Fetch(ctxT(t), "1234567")
		require.Equal(t, "HTTP_502", solver.CodeOf(ferr), "%v", ferr)
	}
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
	require.False(t, solver.MayBePaid(err), "a submission never sent was not paid: %v", err)
	require.EqualValues(t, 2, inCalls.Load())
	require.Equal(t, 2, api.Stats().Submitted)
}

// A WAF or CDN in front of the service answers every call 403 with its own
// HTML page: no word of the service, which took nothing. It is an outage,
// told at once at WARN with the host, submissions wait without spending
// attempts, and it ends when the front lets the calls through; it does not
// stop the worker as the service's own refusal of the key does.
func TestFrontForbiddenIsAnOutage(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	var waf atomic.Bool
	waf.Store(true)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if waf.Load() {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head><body>Sorry, you have been blocked</body></html>"))
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var logs logbuf.Buffer
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
	require.Equal(t, retry.Capacity, solver.ClassOf(err), "%v", err)
	require.False(t, solver.MayBePaid(err), "a front's refusal took nothing: %v", err)
	since, why := c.Unreachable()
	require.False(t, since.IsZero(), "the first 403 begins the outage")
	require.ErrorContains(t, why, "HTTP 403")
	require.ErrorContains(t, why, "Attention Required! | Cloudflare")
	host := strings.TrimPrefix(srv.URL, "http://")
	require.Contains(t, logs.String(), `level=WARN msg="the solving service does not answer`)
	require.Contains(t, logs.String(), "host="+host)
	require.NotContains(t, logs.String(), fakeapi.TestKey)
	_, err = c.Fetch(ctxT(t), "1234567")
	require.Equal(t, retry.Capacity, solver.ClassOf(err), "a poll refused by the front keeps its captcha: %v", err)

	waf.Store(false)
	var id string
	require.Eventually(t, func() bool {
		id, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "a probe finds the front open: %v", err)
	require.NotEmpty(t, id)
	since, _ = c.Unreachable()
	require.True(t, since.IsZero())
	require.Equal(t, 1, api.Stats().Submitted, "paid once")
}

// The service's own refusal of the key stays fatal, in a 403 as in a 200:
// its code in the body (docs.captchaai.com/guides/err_handling: errors come
// as {"status":0,"request":"ERROR_…"} or the bare code) says it is the
// service's word, not a front's page.
func TestServiceKeyErrorsStayFatalInA403(t *testing.T) {
	t.Parallel()
	for name, body := range map[string]string{
		"plain-key-does-not-exist": "ERROR_KEY_DOES_NOT_EXIST",
		"json-wrong-user-key":      `{"status":0,"request":"ERROR_WRONG_USER_KEY","error_text":"You've provided key parameter value in incorrect format, it should contain 32 symbols"}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				w.WriteHeader(http.StatusForbidden)
				_, _ = w.Write([]byte(body))
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1})
			require.NoError(t, err)
			_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
			require.Equal(t, retry.Fatal, solver.ClassOf(err), "%v", err)
			since, _ := c.Unreachable()
			require.True(t, since.IsZero(), "the service answered: no outage")
		})
	}
}

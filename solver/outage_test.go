package solver_test

import (
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/faultproxy"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A frozen service (connections accepted, nothing answered): once a call
// has had no reply for StallAfter, the outage is on and logged at WARN with
// the host (never the key); submissions are refused at once as a capacity
// wait, without a connection, until a probe finds the service answering;
// then one submission is paid once.
func TestFrozenServiceHoldsSubmissions(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	proxy := behindFaultProxy(t, api)
	var logs logbuf.Buffer
	c, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr(), APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		StallAfter: 200 * time.Millisecond, Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)

	proxy.Freeze()
	hung, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { _, err := c.Balance(hung); done <- err }()
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the solving service does not answer") },
		5*time.Second, 10*time.Millisecond)
	require.Contains(t, logs.String(), "level=WARN")
	require.Contains(t, logs.String(), "host="+proxy.Addr())
	require.NotContains(t, logs.String(), fakeapi.TestKey)
	since, why := c.Unreachable()
	require.False(t, since.IsZero())
	require.ErrorContains(t, why, "answers nothing")

	conns := proxy.Accepted()
	start := time.Now()
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
	require.Equal(t, retry.Capacity, solver.ClassOf(err), "no attempt spent")
	require.Less(t, time.Since(start), time.Second, "refused at once, not sent into the hang")
	require.Equal(t, conns, proxy.Accepted(), "no connection made")

	require.NoError(t, proxy.Restore())
	cancel()
	<-done
	var id string
	require.Eventually(t, func() bool {
		id, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "a probe finds the service back: %v", err)
	require.NotEmpty(t, id)
	require.Contains(t, logs.String(), "the solving service answers again")
	require.Equal(t, 1, api.Stats().Submitted, "paid once")
	since, _ = c.Unreachable()
	require.True(t, since.IsZero())
}

// A run of HTTP 5xx is an outage too: from the third in a row no captcha
// is submitted, and those 5xx are a capacity wait, not the task's fault.
func TestServerErrorsInARowAreAnOutage(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	var down atomic.Bool
	var inCalls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			inCalls.Add(1)
		}
		if down.Load() {
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	var logs logbuf.Buffer
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	down.Store(true)
	for i := range 3 {
		_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
		require.Equal(t, "HTTP_502", solver.CodeOf(err), "call %d: %v", i, err)
	}
	require.Equal(t, retry.Capacity, solver.ClassOf(err), "the third 5xx in a row is the outage's")
	require.Contains(t, logs.String(), "HTTP 502")
	require.Contains(t, logs.String(), "level=WARN")
	_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
	require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
	require.EqualValues(t, 3, inCalls.Load(), "no in.php during the outage")
	down.Store(false)
	require.Eventually(t, func() bool {
		_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
		return err == nil
	}, 10*time.Second, 50*time.Millisecond, "%v", err)
	require.Equal(t, 1, api.Stats().Submitted)
}

// behindFaultProxy serves api over loopback HTTP behind a proxy the test
// can make refuse or freeze (faultproxy), and returns the proxy.
func behindFaultProxy(t *testing.T, api http.Handler) *faultproxy.Proxy {
	t.Helper()
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	require.NoError(t, err)
	proxy, err := faultproxy.Start(u.Host)
	require.NoError(t, err)
	t.Cleanup(proxy.Close)
	return proxy
}

// The probes of an outage follow the schedule Config.OutageProbeMax
// bounds: by default a second after the outage began, then at doubling
// gaps up to 15 s (1, 3, 7, 15, 30, 45 s: six probes in the first 50 s
// of a service that answers nothing but 5xx); with OutageProbeMax 100 ms,
// one each 100 ms (19 in the first 2 s). Each submission between probes
// is refused at once.
func TestOutageProbesFollowTheirSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		max         time.Duration
		step, until time.Duration
		want        int32
	}{
		{0, 250 * time.Millisecond, 50 * time.Second, 6},
		{100 * time.Millisecond, 50 * time.Millisecond, 2 * time.Second, 19},
	} {
		var balance atomic.Int32
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.FormValue("action") == "getbalance" {
				balance.Add(1)
			}
			http.Error(w, "bad gateway", http.StatusBadGateway)
		}))
		t.Cleanup(srv.Close)
		var clk clock
		c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
			Now: clk.now, OutageProbeMax: tc.max, Logger: slog.New(slog.DiscardHandler)})
		require.NoError(t, err)
		for range 3 {
			_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
		}
		require.Equal(t, retry.Capacity, solver.ClassOf(err), "the third 5xx in a row begins the outage: %v", err)
		for at := time.Duration(0); at < tc.until; at += tc.step {
			_, err = c.Submit(ctxT(t), turnstile("https://shop.example/"))
			require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "at %v: %v", at, err)
			clk.move(tc.step)
		}
		require.Equal(t, tc.want, balance.Load(), "probes within %v, OutageProbeMax %v", tc.until, tc.max)
	}
}

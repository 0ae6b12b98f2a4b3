package solver_test

import (
	"context"
	"github.com/captchaq/captchaq/retry"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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
	proxy := behindFaultProxy(t, api)
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

// res.php misbehaves for the first polls of a captcha the service accepted,
// each way a service (or what stands before it) does: the captcha is kept
// and polled until the service answers, and paid once.
func TestHostileResPHPPaysOnce(t *testing.T) {
	t.Parallel()
	modes := map[string]func(w http.ResponseWriter){
		"html-200": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<!DOCTYPE html><html><body>Attention Required! | Cloudflare</body></html>"))
		},
		"cut-mid-json": func(w http.ResponseWriter) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 64\r\n\r\n{\"status\":1,\"requ")
			_ = buf.Flush()
			_ = conn.Close()
		},
		"slow-body": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			for _, b := range []byte(`{"status":0,"request":"CAPCHA_NOT_READY"}`) {
				_, _ = w.Write([]byte{b})
				_ = http.NewResponseController(w).Flush()
				time.Sleep(20 * time.Millisecond)
			}
		},
		"http-429": func(w http.ResponseWriter) { http.Error(w, "Too Many Requests", http.StatusTooManyRequests) },
		"http-502": func(w http.ResponseWriter) { http.Error(w, "<html>502 Bad Gateway</html>", http.StatusBadGateway) },
		"error-1005": func(w http.ResponseWriter) {
			_, _ = w.Write([]byte(`{"status":0,"request":"ERROR: 1005"}`))
		},
		"empty-200": func(w http.ResponseWriter) { w.WriteHeader(http.StatusOK) },
		"garbage":   func(w http.ResponseWriter) { _, _ = w.Write([]byte("\x00\xff\xfe OK| nonsense")) },
	}
	for name, mode := range modes {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
			var bad atomic.Int32
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/res.php" && bad.Add(1) <= 4 {
					mode(w)
					return
				}
				api.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				Timing: solver.Timing{Scale: 0.01, Fixed: true, NoBatch: true, MaxWait: map[string]time.Duration{solver.KindTurnstile: 500 * time.Second}}})
			require.NoError(t, err)
			var ids []solver.Accepted
			ctx := solver.WithAccepted(ctxT(t), func(a solver.Accepted) { ids = append(ids, a) })
			a, err := c.Solve(ctx, turnstile("https://shop.example/"))
			require.NoError(t, err)
			require.NotEmpty(t, a.Solution)
			st := api.Stats()
			require.Equal(t, 1, st.Submitted, "paid once")
			require.Equal(t, 1, st.Solved)
			require.Len(t, ids, 1)
			require.Equal(t, ids[0].ID, a.CaptchaID, "the captcha accepted is the one answered")
			require.GreaterOrEqual(t, bad.Load(), int32(5), "the service misbehaved on 4 polls first")
		})
	}
}

// The service's ids change between in.php and res.php (or it forgets them
// at once): every poll says ERROR_WRONG_CAPTCHA_ID. A fresh captcha is
// given up with that word, paid once; a resumed one is submitted anew once,
// and the new one given up too: never a loop of payments.
func TestIDsThatChangeAreNeverALoopOfPayments(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/res.php" {
			_, _ = w.Write([]byte(`{"status":0,"request":"ERROR_WRONG_CAPTCHA_ID"}`))
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.01, Fixed: true, NoBatch: true}})
	require.NoError(t, err)
	_, err = c.Solve(ctxT(t), turnstile("https://shop.example/"))
	require.True(t, solver.CaptchaUnknown(err), "%v", err)
	require.Equal(t, 1, api.Stats().Submitted)

	req := turnstile("https://shop.example/")
	req.CaptchaID = "73100000001"
	_, err = c.Solve(ctxT(t), req)
	require.True(t, solver.CaptchaUnknown(err), "%v", err)
	require.Equal(t, 2, api.Stats().Submitted, "the resumed captcha replaced once, not again")
}

// A service that takes every captcha and whose every in.php reply is lost
// (an HTML page in its place, the connection cut, or the body trickled
// slower than the call's timeout) while res.php
// answers: each submission fails as transient and says it may have been
// paid, so the caller spends an attempt on each and the payments stay
// bounded by its attempts. Counting such calls as an outage (a capacity
// wait, no attempt spent) would let a task pay on every probe until its
// deadline.
func TestLostInPHPRepliesStayBoundedByAttempts(t *testing.T) {
	t.Parallel()
	for name, lose := range map[string]func(w http.ResponseWriter){
		"html-200": func(w http.ResponseWriter) {
			w.Header().Set("Content-Type", "text/html")
			_, _ = w.Write([]byte("<!DOCTYPE html><html><body>Just a moment...</body></html>"))
		},
		"cut": func(w http.ResponseWriter) {
			if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
				_ = conn.Close()
			}
		},
		"slow-body": func(w http.ResponseWriter) { // a byte every 100 ms: the call's timeout ends it mid-body
			w.WriteHeader(http.StatusOK)
			for _, b := range []byte(`{"status":1,"request":"73100000001"}`) {
				if _, err := w.Write([]byte{b}); err != nil {
					return
				}
				_ = http.NewResponseController(w).Flush()
				time.Sleep(100 * time.Millisecond)
			}
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == "/in.php" {
					api.ServeHTTP(httptest.NewRecorder(), r) // taken, and paid
					lose(w)
					return
				}
				api.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				HTTPClient: &http.Client{Timeout: 500 * time.Millisecond}})
			require.NoError(t, err)
			for i := range 6 {
				_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
				require.Equal(t, retry.Transient, solver.ClassOf(err), "submission %d: %v", i+1, err)
				require.True(t, solver.MayBePaid(err), "submission %d: %v", i+1, err)
				_, ferr := c.Fetch(ctxT(t), "1234567")
				require.NotEqual(t, retry.Transient, solver.ClassOf(ferr), "%v", ferr)
			}
			st := api.Stats()
			require.Equal(t, 6, st.Submitted, "each call that may have paid did, and each told its caller so")
			require.Equal(t, 6, st.InCalls)
		})
	}
}

// The service answers in.php and getbalance but res.php's polls hang
// (a front that holds them): the captchas accepted are kept through the
// hung polls, the submissions go on (a probe finds the service answering),
// and once res.php answers again every captcha is solved: each paid once.
func TestHungResPHPWithALiveBalanceKeepsTheCaptchas(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	var hang atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/res.php" && hang.Load() {
			_ = r.ParseForm()
			if r.PostForm.Get("action") == "get" {
				<-r.Context().Done() // never answers; the client gives up
				return
			}
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		HTTPClient: &http.Client{Timeout: 300 * time.Millisecond}, StallAfter: 100 * time.Millisecond,
		Timing: solver.Timing{Scale: 0.01, Fixed: true, NoBatch: true, MaxWait: map[string]time.Duration{solver.KindTurnstile: 1000 * time.Second}}})
	require.NoError(t, err)
	hang.Store(true)
	const n = 4
	errs := make(chan error, n)
	var held atomic.Int32
	for range n {
		go func() {
			ctx := solver.WithHeld(ctxT(t), func(h solver.Held) {
				if h.Again.IsZero() {
					held.Add(1)
				}
			})
			_, err := c.Solve(ctx, turnstile("https://shop.example/"))
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return held.Load() == n }, 8*time.Second, 10*time.Millisecond,
		"every captcha's polls hang: each is held")
	require.Equal(t, n, api.Stats().Submitted, "each submitted once, the hung polls notwithstanding")
	hang.Store(false)
	for range n {
		require.NoError(t, <-errs)
	}
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "paid once each")
	require.Equal(t, n, st.Solved)
}

// The client's clock goes an hour back while a captcha is polled (batched
// or not): its polls keep their spacing in the time that really passes,
// instead of waiting for the clock to come back to them, and the answer
// is taken within seconds. Paid once.
func TestClockBackWhilePollingKeepsPolling(t *testing.T) {
	t.Parallel()
	for name, noBatch := range map[string]bool{"single": true, "batch": false} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 300 * time.Millisecond, Median: 300 * time.Millisecond, Max: 300 * time.Millisecond}}})
			var clk clock
			var moved atomic.Bool
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				api.ServeHTTP(w, r)
				if r.URL.Path == "/res.php" && moved.CompareAndSwap(false, true) {
					clk.move(-time.Hour)
				}
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1, Now: clk.now,
				Timing: solver.Timing{Scale: 0.02, Fixed: true, NoBatch: noBatch, FirstPoll: map[string]time.Duration{solver.KindTurnstile: time.Second}}})
			require.NoError(t, err)
			const n = 3
			errs := make(chan error, n)
			for range n {
				go func() {
					_, err := c.Solve(ctxT(t), turnstile("https://shop.example/"))
					errs <- err
				}()
			}
			for range n {
				require.NoError(t, <-errs)
			}
			require.True(t, moved.Load())
			st := api.Stats()
			require.Equal(t, n, st.Submitted, "paid once each")
			require.Equal(t, n, st.Solved)
		})
	}
}

// The service refuses connections while captchas it accepted are polled,
// and the client's clock jumps during it: an hour forward, past every
// captcha's MaxWait; or 10 minutes forward, then back (a machine's clock
// stepped, then corrected: the jump back is no reason to give them up as
// if they had waited the 10 minutes the clock came back over). The
// captchas are still the caller's, held through the refusals, and their
// answers are taken once the service is back. Paid once each.
func TestClockForwardDuringOutageKeepsTheHeldCaptchas(t *testing.T) {
	t.Parallel()
	for name, jumps := range map[string]func(clk *clock){
		"hour-ahead": func(clk *clock) { clk.move(time.Hour) },
		"ahead-then-back": func(clk *clock) {
			clk.move(10 * time.Minute)
			time.Sleep(300 * time.Millisecond) //nolint:forbidigo // polls refused with the clock ahead
			clk.move(-10 * time.Minute)
			time.Sleep(300 * time.Millisecond) //nolint:forbidigo // polls refused with the clock back
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			heldThroughClockJumps(t, jumps)
		})
	}
}

// heldThroughClockJumps runs TestClockForwardDuringOutageKeepsTheHeldCaptchas
// with the clock's jumps during the refusals.
func heldThroughClockJumps(t *testing.T, jumps func(clk *clock)) {
	api := fakeapi.New(fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: {Min: 200 * time.Millisecond, Median: 200 * time.Millisecond, Max: 200 * time.Millisecond}}})
	proxy := behindFaultProxy(t, api)
	var clk clock
	c, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr(), APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1, Now: clk.now,
		Timing: solver.Timing{Scale: 0.02, Fixed: true, FirstPoll: map[string]time.Duration{solver.KindTurnstile: 30 * time.Second}}})
	require.NoError(t, err)
	const n = 3
	var accepted atomic.Int32
	errs := make(chan error, n)
	for range n {
		go func() {
			ctx := solver.WithAccepted(ctxT(t), func(solver.Accepted) { accepted.Add(1) })
			_, err := c.Solve(ctx, turnstile("https://shop.example/"))
			errs <- err
		}()
	}
	require.Eventually(t, func() bool { return accepted.Load() == n }, 5*time.Second, time.Millisecond)
	proxy.Refuse()
	require.Eventually(t, func() bool { return c.Held() == n && !func() bool { s, _ := c.Unreachable(); return s.IsZero() }() },
		5*time.Second, 5*time.Millisecond, "the polls are refused")
	jumps(&clk)
	require.NoError(t, proxy.Restore())
	for range n {
		require.NoError(t, <-errs)
	}
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "paid once each")
	require.Equal(t, n, st.Solved)
}

// The service takes every captcha but answers in.php only after the
// client's timeout (OK|id too late), while getbalance answers at once: the
// worker's prober finds the service answering during each hang, so the
// service is no frozen one and the timed-out submission may have been
// paid. Each must spend its attempt (transient, MayBePaid), as a reply
// lost any other way does; taken as an outage (a capacity wait, no attempt
// spent) the task would submit again after every probe and pay on each
// until its deadline.
func TestLateInPHPRepliesStayBoundedByAttempts(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/in.php" {
			rec := httptest.NewRecorder()
			api.ServeHTTP(rec, r) // taken, and paid
			<-r.Context().Done()  // OK|id only after the client gave up
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		HTTPClient: &http.Client{Timeout: 1500 * time.Millisecond}, StallAfter: 100 * time.Millisecond})
	require.NoError(t, err)
	probes, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { // the worker's prober (cmd/captchaq probeOutages), faster
		for probes.Err() == nil {
			c.Probe(probes)
			time.Sleep(50 * time.Millisecond)
		}
	}()
	const n = 4
	for i := range n {
		_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
		require.Equal(t, retry.Transient, solver.ClassOf(err), "submission %d: %v", i+1, err)
		require.True(t, solver.MayBePaid(err), "submission %d: %v", i+1, err)
	}
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "each call that may have paid did, and each told its caller so")
	require.Equal(t, n, st.InCalls)
}

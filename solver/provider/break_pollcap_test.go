package provider_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
)

// heldCalls is the getTaskResult calls the emulator counted for its one
// task, and the task's id.
func heldCalls(t *testing.T, api *fakeapi.Server) (string, int) {
	t.Helper()
	st := api.Stats()
	require.Len(t, st.ResCallsPerCaptcha, 1, "one task")
	for id, n := range st.ResCallsPerCaptcha {
		return id, n
	}
	return "", 0
}

// TestBreakPollCapResumedTaskCountsAgain: a worker polls a task the
// provider holds 100 times and dies (its ctx cancelled); the next worker
// resumes the task (req.CaptchaID, req.Submitted, as the stream's
// accepted record gives them) with a new TasksClient. The provider is
// asked the task past the 120 per task that CapSolver and CapMonster
// Cloud publish (provider.MaxTaskCalls).
func TestBreakPollCapResumedTaskCountsAgain(t *testing.T) {
	t.Parallel()
	const scale = 0.002
	api, url := timedEmulator(t, time.Second)
	defer api.Hold()()
	req := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-held", "pageurl": "https://shop.example/"}}
	first, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	submitted := time.Now()
	go func() {
		_, err := first.Solve(ctx, req)
		done <- err
	}()
	require.Eventually(t, func() bool {
		st := api.Stats()
		for _, n := range st.ResCallsPerCaptcha {
			return n >= 100
		}
		return false
	}, 30*time.Second, time.Millisecond)
	cancel() // the worker dies
	<-done
	id, before := heldCalls(t, api)

	second, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	rctx, rcancel := context.WithTimeout(t.Context(), time.Duration(float64(30*time.Minute)*scale))
	defer rcancel()
	resumed := req
	resumed.CaptchaID, resumed.Submitted = id, submitted
	_, err = second.Solve(rctx, resumed)
	_, calls := heldCalls(t, api)
	t.Logf("getTaskResult calls of the task: %d before the restart, %d in all; the resumed solve ended with %v", before, calls, err)
	requirePaidOnce(t, api, 1)
	require.LessOrEqual(t, calls, provider.MaxTaskCalls, "the task was asked past the providers' limit per task across a restart")
}

// TestBreakPollCapOldResumedTaskIsAskedOnce: a task resumed long after
// its submission (an hour, past any count of calls a worker could have
// made of it) is still asked once, and its answer, paid for, taken: the
// calls reckoned made before a resume are all but one of the limit.
func TestBreakPollCapOldResumedTaskIsAskedOnce(t *testing.T) {
	t.Parallel()
	const scale = 0.002
	api, url := timedEmulator(t, time.Millisecond)
	release := api.Hold()
	defer release()
	req := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-held", "pageurl": "https://shop.example/"}}
	first, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		_, err := first.Solve(ctx, req)
		done <- err
	}()
	require.Eventually(t, func() bool { return len(api.Stats().ResCallsPerCaptcha) == 1 }, 30*time.Second, time.Millisecond)
	cancel() // the worker dies
	<-done
	id, before := heldCalls(t, api)
	release()
	require.Eventually(t, func() bool { return api.Stats().Concurrent == 0 }, 30*time.Second, time.Millisecond)

	// The resumed client's own calls are counted as it sends them: the
	// dead worker's last poll, sent before its cancel, may reach the
	// emulator after before was read (13 of 200 runs beside a busy loop
	// counted before+2 at the emulator).
	var asked atomic.Int32
	hc := &http.Client{Transport: roundTrip(func(r *http.Request) (*http.Response, error) {
		if strings.HasSuffix(r.URL.Path, "getTaskResult") {
			asked.Add(1)
		}
		return http.DefaultTransport.RoundTrip(r)
	})}
	second, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: fakeapi.TestKey, Timing: solver.Timing{Scale: scale}, HTTPClient: hc})
	require.NoError(t, err)
	resumed := req
	resumed.CaptchaID, resumed.Submitted = id, time.Now().Add(-time.Hour)
	ans, err := second.Solve(t.Context(), resumed)
	require.NoError(t, err)
	require.NotEmpty(t, ans.Solution)
	require.EqualValues(t, 1, asked.Load(), "asked once after the resume")
	_, calls := heldCalls(t, api)
	require.Greater(t, calls, before, "the emulator saw the resumed call")
	requirePaidOnce(t, api, 1)
}

// roundTrip is an http.RoundTripper of a function.
type roundTrip func(*http.Request) (*http.Response, error)

func (f roundTrip) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBreakPollCapTLSFailuresAreNoCalls: a task the provider accepted,
// whose provider then fails every TLS handshake (an expired certificate, a
// middlebox: no request reaches its API), is polled through the outage
// until the caller's deadline, as through refused connections
// (TestTasksClientCountsOnlyTheCallsThatReachTheProvider): a handshake
// that failed is no getTaskResult call of the 120. Timing × 0.002: 120
// attempts come within 1.5 s of the 3.6-s deadline. Paid once.
func TestBreakPollCapTLSFailuresAreNoCalls(t *testing.T) {
	t.Parallel()
	const scale = 0.002
	api := fakeapi.New(fakeapi.Config{Seed: 11, Price: spareBilling.Per1000})
	defer api.Hold()()
	var broken atomic.Bool
	srv := httptest.NewUnstartedServer(api)
	srv.TLS = &tls.Config{GetConfigForClient: func(*tls.ClientHelloInfo) (*tls.Config, error) {
		if broken.Load() {
			return nil, errors.New("no certificate")
		}
		return nil, nil
	}}
	srv.Config.SetKeepAlivesEnabled(false)           // every call a handshake
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // its handshakes fail, as meant
	srv.StartTLS()
	t.Cleanup(srv.Close)
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: srv.URL, APIKey: fakeapi.TestKey, HTTPClient: srv.Client(),
		Timing: solver.Timing{Scale: scale}})
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), time.Duration(float64(30*time.Minute)*scale))
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := c.Solve(ctx, solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-held", "pageurl": "https://shop.example/"}})
		done <- err
	}()
	require.Eventually(t, func() bool { return len(api.Stats().ResCallsPerCaptcha) == 1 }, 10*time.Second, time.Millisecond)
	broken.Store(true)
	err = <-done
	_, calls := heldCalls(t, api)
	t.Logf("getTaskResult calls that reached the emulator: %d; the solve ended with %v", calls, err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "polled through the TLS outage until the deadline")
	require.NotEqual(t, solver.CodePollLimit, solver.CodeOf(err))
	require.NotContains(t, err.Error(), fakeapi.TestKey)
	requirePaidOnce(t, api, 1)
}

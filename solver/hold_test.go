package solver_test

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// inPHPCounter counts the in.php requests a Client sends, whether or not
// anything answers them.
type inPHPCounter struct {
	next http.RoundTripper
	n    atomic.Int32
}

func (c *inPHPCounter) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.Path == "/in.php" {
		c.n.Add(1)
	}
	return c.next.RoundTrip(r)
}

// An in.php call that hangs (the service frozen: connections accepted,
// nothing answered) for longer than StallAfter/5 holds the submissions
// that come after it: they wait for its reply, at most StallAfter, instead
// of going into the hang too (a service that comes back answers every
// submission queued in it within a second, and bans the key for it:
// MAX_USER_TURN). Once the hang is an outage they are refused as a
// capacity wait: one in.php sent, one captcha paid.
func TestSubmissionsHeldWhileAnInPHPCallHangs(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001})
	proxy := behindFaultProxy(t, api)
	calls := &inPHPCounter{next: http.DefaultTransport.(*http.Transport).Clone()}
	const stall = time.Second
	c, err := solver.NewClient(solver.Config{BaseURL: "http://" + proxy.Addr(), APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		HTTPClient: &http.Client{Transport: calls, Timeout: time.Minute}, StallAfter: stall})
	require.NoError(t, err)

	proxy.Freeze()
	first := make(chan error, 1)
	go func() { _, err := c.Submit(ctxT(t), turnstile("https://shop.example/")); first <- err }()
	require.Eventually(t, func() bool { return calls.n.Load() == 1 }, 5*time.Second, time.Millisecond)
	time.Sleep(stall/5 + 100*time.Millisecond) // the first call hangs that long

	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Go(func() {
			_, err := c.Submit(ctxT(t), turnstile("https://shop.example/"))
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	require.EqualValues(t, 1, calls.n.Load(), "no in.php sent into the hang")
	require.Less(t, time.Since(start), stall+time.Second, "held at most StallAfter")
	for err := range errs {
		require.Equal(t, solver.CodeUnreachable, solver.CodeOf(err), "%v", err)
		require.Equal(t, retry.Capacity, solver.ClassOf(err), "no attempt spent")
	}

	require.NoError(t, proxy.Restore())
	require.NoError(t, <-first, "the hung call is answered once the service thaws")
	st := api.Stats()
	require.Equal(t, 1, st.InCalls)
	require.Equal(t, 1, st.Submitted, "paid once")
}

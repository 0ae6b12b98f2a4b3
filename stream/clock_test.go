package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A worker whose clock is three minutes behind its producer's still hands
// out a reCAPTCHA token that the producer can use for its whole lifetime:
// token expiry is measured on the broker's clock, not on the worker's.
func TestWorkerClockBehindDoesNotExpireTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	behind := func() time.Time { return time.Now().Add(-3 * time.Minute) }
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Now: behind})
	start := time.Now()
	out, err := b.client.Solve(ctx, recaptchaTask("skewed-behind"))
	require.NoError(t, err, "a fresh token is not expired on arrival")
	require.NotEmpty(t, out.Solution)
	life := DefaultTokenLifetimes["userrecaptcha"]
	require.WithinDuration(t, start.Add(life), out.ExpiresAt, 10*time.Second,
		"expires_at is the solve's end plus the lifetime on the producer's (the broker's) clock")
}

// The same with a worker clock three minutes ahead: the token does not
// outlive its real lifetime in the producer's eyes.
func TestWorkerClockAheadDoesNotStretchTokens(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	ahead := func() time.Time { return time.Now().Add(3 * time.Minute) }
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Now: ahead})
	start := time.Now()
	r, err := b.client.Submit(ctx, recaptchaTask("skewed-ahead")) // deadline 10 min on: past the worker's skew
	require.NoError(t, err)
	out, err := b.client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.WithinDuration(t, start.Add(DefaultTokenLifetimes["userrecaptcha"]), out.ExpiresAt, 10*time.Second)
}

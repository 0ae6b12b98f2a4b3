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

// A producer whose clock is three minutes ahead of the broker's still gets
// its reCAPTCHA token (a 120-s lifetime), and its expires_at on its own
// clock: whether a token is expired is decided on the broker's clock.
func TestProducerClockAheadGetsItsToken(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	ahead := func() time.Time { return time.Now().Add(3 * time.Minute) }
	client, err := NewClient(ctx, b.nc, ClientConfig{Name: "skewed-producer", Now: ahead})
	require.NoError(t, err)
	start := ahead()
	r, err := client.Submit(ctx, recaptchaTask("producer-ahead"))
	require.NoError(t, err)
	out, err := client.Wait(ctx, r.ID)
	require.NoError(t, err, "a fresh token is not expired on arrival")
	require.NotEmpty(t, out.Solution)
	require.WithinDuration(t, start.Add(DefaultTokenLifetimes["userrecaptcha"]), out.ExpiresAt, 10*time.Second,
		"expires_at on the producer's own clock")
}

// A worker whose clock is eleven minutes ahead does not find a task with
// the default ten-minute deadline expired on arrival: deadlines are on the
// broker's clock.
func TestWorkerClockFarAheadKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	ahead := func() time.Time { return time.Now().Add(11 * time.Minute) }
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), Now: ahead})
	out, err := b.client.Solve(ctx, recaptchaTask("worker-far-ahead"))
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status, "%s %s", out.Reason, out.Error)
}

// A producer whose clock is eleven minutes behind submits a task whose
// default deadline is still ten minutes on: it is solved, not dead.
func TestProducerClockFarBehindKeepsTheDeadline(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	behind := func() time.Time { return time.Now().Add(-11 * time.Minute) }
	client, err := NewClient(ctx, b.nc, ClientConfig{Name: "skewed-producer", Now: behind})
	require.NoError(t, err)
	r, err := client.Submit(ctx, recaptchaTask("producer-far-behind"))
	require.NoError(t, err)
	out, err := client.Wait(ctx, r.ID)
	require.NoError(t, err)
	require.Equal(t, StatusSolved, out.Status, "%s %s", out.Reason, out.Error)
}

package stream

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
)

// A NewSolver or WrapSolver that hands back no solver (and no error) is a
// configuration mistake: NewWorker refuses it, naming the field, instead of
// a worker that crashes at its first task.
func TestNewWorkerRefusesNoSolverFromTheConfig(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	client := func(bool) (*solver.Client, error) {
		return solver.NewClient(solver.Config{BaseURL: "http://127.0.0.1:1", APIKey: "0123456789abcdef0123456789abcdef"})
	}

	_, err := NewWorker(ctx, b.nc, WorkerConfig{Topology: b.top,
		NewSolver: func(bool) (*solver.Client, error) { return nil, nil }})
	require.ErrorContains(t, err, "NewSolver")

	_, err = NewWorker(ctx, b.nc, WorkerConfig{Topology: b.top, NewSolver: client,
		WrapSolver: func(solver.Solver) solver.Solver { return nil }})
	require.ErrorContains(t, err, "WrapSolver")
}

// Every method captchaq accepts has a known token lifetime, and nothing
// else has one: a method added to the solver without one would have its
// tokens kept for a guess.
func TestDefaultTokenLifetimesNameEveryMethod(t *testing.T) {
	t.Parallel()
	for _, m := range solver.Methods() {
		require.Positive(t, DefaultTokenLifetimes[m], "method %s has no token lifetime", m)
	}
	require.Len(t, DefaultTokenLifetimes, len(solver.Methods()), "a lifetime for a method captchaq does not accept")
}

// Lifetimes given for some methods leave the others at their defaults (not
// at a guess), and a lifetime for a method captchaq does not accept (a
// typo) is refused, naming it.
func TestTokenLifetimesGivenForSomeMethods(t *testing.T) {
	t.Parallel()
	cfg := WorkerConfig{Solver: tokenSolver(), TokenLifetimes: map[string]time.Duration{"turnstile": time.Second}}
	require.NoError(t, cfg.validate())
	got := cfg.withDefaults().TokenLifetimes
	for _, m := range solver.Methods() {
		want := DefaultTokenLifetimes[m]
		if m == "turnstile" {
			want = time.Second
		}
		require.Equal(t, want, got[m], m)
	}
	require.Equal(t, 300*time.Second, DefaultTokenLifetimes["turnstile"], "the defaults are left as they are")

	cfg.TokenLifetimes = map[string]time.Duration{"turnstyle": time.Second}
	err := cfg.validate()
	require.ErrorContains(t, err, `TokenLifetimes["turnstyle"]`)
	require.ErrorContains(t, err, "turnstile", "the methods it could be")
}

// A solved task of a method the worker's TokenLifetimes do not name keeps
// its token for the method's default lifetime.
func TestTokenLifetimeOfAMethodNotGivenIsItsDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: tokenSolver(), TokenLifetimes: map[string]time.Duration{"turnstile": 5 * time.Second}})
	out, err := b.client.Solve(ctx, Task{ID: "cf", Method: "cloudflare_challenge",
		Params: Params{"pageurl": "https://shop.example/cf", "proxy": "203.0.113.7:8080", "proxytype": "HTTP"}})
	require.NoError(t, err)
	require.InDelta(t, DefaultTokenLifetimes["cloudflare_challenge"].Seconds(), out.ExpiresAt.Sub(out.SolvedAt).Seconds(), 2)
}

package stream

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A key rotated on a running pool: the account's new key beside its old
// one while the workers restart one by one. The two keys are one account
// of 10 threads, but their fingerprints (solver.Client.PlanAccount) are
// two: the server sets no quota, and each worker holds its share of its
// key's plan, 5 each for the two on the old key and 10 for the one on the
// new, 20 at an account of 10. Skipped: it fails, and nothing the service
// tells (threadsinfo: threads, working_threads, free_threads) names the
// account behind a key, so the pool cannot tell two keys of one account
// from two accounts.
func TestAKeyRotatedOnARunningPoolHoldsTheAccountsPlan(t *testing.T) {
	t.Skip("known: two keys of one account count as two accounts (30 of 90 submissions refused); see the comment")
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	api := fakeapi.New(fakeapi.Config{Keys: []string{keyA, keyB}, Threads: 10, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: {Min: 100 * time.Millisecond, Median: 200 * time.Millisecond, Max: 400 * time.Millisecond}}})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	of := func(key string) func(bool) (*solver.Client, error) {
		return func(learnPlan bool) (*solver.Client, error) {
			return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: key, MinSubmitInterval: -1, SubmitBurst: -1,
				Timing: solver.Timing{Scale: 0.01}, LearnPlan: learnPlan, PlanFromService: true})
		}
	}
	b.startWorker(t, WorkerConfig{Name: "old1", NewSolver: of(keyA), Threads: 20})
	b.startWorker(t, WorkerConfig{Name: "old2", NewSolver: of(keyA), Threads: 20})
	b.startWorker(t, WorkerConfig{Name: "new1", NewSolver: of(keyB), Threads: 20})
	solvedEach(t, b, pagesBurst("rotated", 90))
	st := api.Stats()
	t.Logf("accepted %d, refused %d, most at once %d, quota %+v", st.Submitted, st.Codes[classic.CodeZeroBalance], st.MaxConcurrent, readPlan(t, b))
	require.Equal(t, 90, st.Submitted, "each task paid once")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
	assert.Zero(t, st.Codes[classic.CodeZeroBalance], "the account of 10 was sent more than its plan")
}

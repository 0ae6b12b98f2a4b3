package stream

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// captchaq stats run on a machine whose clock is 10 minutes ahead of the
// broker's still says the plan the service told the live worker: the
// workers' windows are stamped on the broker's clock, and are judged
// fresh on it, not on the reader's.
func TestStatsOfAClientWhoseClockIsAheadSayTheToldPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	api := toldAPI(6, "")
	w := b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 4})
	burstSolved(t, b, api, pagesBurst("statsahead", 2))
	require.True(t, w.w.SolverClient().PlanTold())
	ctx := testContext(t)
	require.Eventually(t, func() bool {
		st, err := b.client.Stats(ctx, time.Hour)
		return err == nil && st.ToldPlan == 6
	}, 10*time.Second, 20*time.Millisecond, "the broker-synced client says the told plan")
	ahead, err := NewClient(ctx, b.nc, ClientConfig{Name: "ahead", Now: func() time.Time { return time.Now().Add(10 * time.Minute) }})
	require.NoError(t, err)
	st, err := ahead.Stats(ctx, time.Hour)
	require.NoError(t, err)
	t.Logf("clock 10 min ahead: told %d, learned %d (%d workers); paid %d, refused %d", st.ToldPlan, st.LearnedPlan, st.LearnedPlanWorkers,
		api.Stats().Submitted, api.Stats().Codes[classic.CodeZeroBalance])
	require.Equal(t, 6, st.ToldPlan, "stats of a client 10 min ahead lost the worker's told plan")
}

// A live server whose clock is 10 minutes behind the broker's, or a
// worker whose clock is 10 minutes ahead, still has the worker wait for
// the quota the server sets from its reading before its first task, as
// with clocks on time: its first captcha holds a plan thread. Here the
// server's write of the quota is held (its write hook) until the test has
// seen that nothing was submitted for a second; a worker that judged the
// server gone submits at once.
func TestAWorkerWaitsForALiveServerWhateverTheirClocks(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name           string
		server, worker time.Duration
	}{{"on time", 0, 0}, {"server behind", -10 * time.Minute, 0}, {"worker ahead", 0, 10 * time.Minute}} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top, Now: func() time.Time { return time.Now().Add(c.server) }})
			require.NoError(t, err)
			entered, release := make(chan struct{}), make(chan struct{})
			var once sync.Once
			fctx, cancel := context.WithCancel(topology.WithServiceWriteHook(context.Background(), func() {
				once.Do(func() { close(entered); <-release })
			}))
			t.Cleanup(cancel)
			released := sync.OnceFunc(func() { close(release) })
			t.Cleanup(released)
			require.NoError(t, adm.FollowServicePlan(fctx, nil))
			api := toldAPI(6, "")
			srv := httptest.NewServer(api)
			t.Cleanup(srv.Close)
			now := func() time.Time { return time.Now().Add(c.worker) }
			b.startWorker(t, WorkerConfig{Name: "w1", Threads: 2, Now: now, NewSolver: func(learnPlan bool) (*solver.Client, error) {
				return solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
					Now: now, Timing: toldTiming, LearnPlan: learnPlan, PlanFromService: true})
			}})
			ctx := testContext(t)
			rs, err := b.client.SubmitAll(ctx, pagesBurst("followedskew", 1))
			require.NoError(t, err)
			select {
			case <-entered:
			case <-ctx.Done():
				t.Fatal("the server never wrote the quota")
			}
			early := !assert.Never(t, func() bool { return api.Stats().Submitted > 0 }, time.Second, 10*time.Millisecond,
				"the worker submitted before the live server set the quota: it judged the server gone")
			released()
			require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
				assert.NoError(t, err)
				assert.Equal(t, StatusSolved, o.Status, "%+v", o)
			}))
			st := api.Stats()
			t.Logf("%s: submitted before the quota %v; paid %d, refused %d", c.name, early, st.Submitted, st.Codes[classic.CodeZeroBalance])
			paidOnceAcross(t, 1, st)
		})
	}
}

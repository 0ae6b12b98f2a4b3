package stream

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/wire"
)

// imageBody is an image task's body: 1 KB, the service's least size, base64.
var imageBody = base64.StdEncoding.EncodeToString(append([]byte("\x89PNG\r\n\x1a\n"), make([]byte, 1024)...))

// TestTimingsSurviveRestart: a worker's client learns that the service
// answers images in about a second (its first poll is at 5 s) and shares it;
// a client started afterwards on another connection, before any answer of
// its own, polls with what the pool learned: its answers are picked up
// within 1.5 s (real time) of being ready, not after the fixed first poll.
func TestTimingsSurviveRestart(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	b := setup(t, Topology{})
	ctx := testContext(t)
	api := fakeapi.New(fakeapi.Config{Seed: 3, TimeScale: scale, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: 500 * time.Millisecond, Max: 1300 * time.Millisecond}}})
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	client := func() *solver.Client {
		c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			Timing: solver.Timing{Scale: scale, NoBatch: true}})
		require.NoError(t, err)
		return c
	}
	store := func() *Timings {
		js, err := jetstream.New(b.connect(t))
		require.NoError(t, err)
		ts, err := OpenTimings(ctx, js.Conn(), b.top)
		require.NoError(t, err)
		return ts
	}
	image := solver.Request{Method: "base64", Params: map[string]string{"body": imageBody}}
	solve := func(c *solver.Client, n, at int) {
		var wg sync.WaitGroup
		jobs := make(chan struct{}, n)
		for range n {
			jobs <- struct{}{}
		}
		close(jobs)
		for range at {
			wg.Go(func() {
				for range jobs {
					_, err := c.Solve(ctx, image)
					require.NoError(t, err)
				}
			})
		}
		wg.Wait()
	}

	first, one := client(), store()
	require.NoError(t, first.ShareTimings(ctx, one))
	solve(first, 80, 10)
	require.NoError(t, first.ShareTimings(ctx, one))
	held, err := one.Load(ctx)
	require.NoError(t, err)
	img, ok := held[solver.KindImage]
	require.True(t, ok, "the bucket holds no image timings: %v", held)
	require.Greater(t, img.N, 50)
	require.Less(t, img.Median, s(1500*time.Millisecond), "median %v", img.Median)
	require.Greater(t, img.Median, s(400*time.Millisecond), "median %v", img.Median)

	// The restart: a new client, no answers of its own yet.
	second := client()
	require.NoError(t, second.ShareTimings(ctx, store()))
	before := api.Stats()
	solve(second, 10, 1)
	after := api.Stats()
	n := after.Pickups - before.Pickups
	require.Equal(t, 10, n)
	lag := (after.PickupLagMean*time.Duration(after.Pickups) - before.PickupLagMean*time.Duration(before.Pickups)) / time.Duration(n)
	t.Logf("pool: image median %v (real %v) over %d answers; restarted client: mean pickup lag %v real", img.Median,
		time.Duration(float64(img.Median)/scale), img.N, time.Duration(float64(lag)/scale))
	require.LessOrEqual(t, lag, s(1500*time.Millisecond), "the restarted client polled as if it knew nothing")
}

// TestTimingsMergeConcurrently: workers merging the same kind at once each
// count: compare-and-set makes a loser merge into the winner's value.
func TestTimingsMergeConcurrently(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var wg sync.WaitGroup
	for range 8 {
		js, err := jetstream.New(b.connect(t))
		require.NoError(t, err)
		ts, err := OpenTimings(ctx, js.Conn(), b.top)
		require.NoError(t, err)
		wg.Go(func() {
			_, err := ts.MergeTimings(ctx, map[string]solver.Learned{solver.KindTurnstile: {Median: 4 * time.Second, Sigma: 0.3, N: 10, At: time.Now()}})
			require.NoError(t, err)
		})
	}
	wg.Wait()
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	ts, err := OpenTimings(ctx, js.Conn(), b.top)
	require.NoError(t, err)
	held, err := ts.Load(ctx)
	require.NoError(t, err)
	got := held[solver.KindTurnstile]
	require.Equal(t, 80, got.N, "every merge counted once")
	require.InDelta(t, 4*time.Second, got.Median, float64(time.Millisecond))
}

// TestAuthWorkerSharesTimings: with the shipped roles, a worker reads and
// merges the timings bucket the admin created; a producer may read it (for
// stats) but not write it.
func TestAuthWorkerSharesTimings(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	admin, _ := roleConn(t, ns, "admin")
	ajs, err := jetstream.New(admin)
	require.NoError(t, err)
	_, err = EnsureTimings(ctx, ajs.Conn(), Topology{})
	require.NoError(t, err)

	// Another worker follows the merges as they are stored, and the
	// occupancy reports.
	follower, ferrs := roleConn(t, ns, "worker")
	adopted := make(chan map[string]solver.Learned, 4)
	stopFollow, err := pool.FollowTimings(follower, "", func(m map[string]solver.Learned) { adopted <- m }, time.Now, nil)
	require.NoError(t, err)
	t.Cleanup(stopFollow)
	occ, stopPool, err := pool.JoinOccupancy(follower, "follower")
	require.NoError(t, err)
	t.Cleanup(stopPool)
	require.NoError(t, follower.Flush())

	worker, werrs := roleConn(t, ns, "worker")
	wjs, err := jetstream.New(worker)
	require.NoError(t, err)
	ws, err := OpenTimings(ctx, wjs.Conn(), Topology{})
	require.NoError(t, err)
	held, err := ws.MergeTimings(ctx, map[string]solver.Learned{solver.KindImage: {Median: time.Second, Sigma: 0.4, N: 12, At: time.Now()}})
	require.NoError(t, err)
	require.Equal(t, 12, held[solver.KindImage].N)
	select {
	case m := <-adopted:
		require.Equal(t, 12, m[solver.KindImage].N, "the follower plans with what the other worker merged")
	case <-ctx.Done():
		t.Fatal("the follower never saw the merge")
	}
	reporter, _, err := pool.JoinOccupancy(worker, "reporter")
	require.NoError(t, err)
	reporter.Report(solver.Occupancy{V: 1.5, Free: 0.25})
	require.Eventually(t, func() bool { return len(occ.Others()) == 1 }, 5*time.Second, 5*time.Millisecond)
	for _, errs := range []<-chan error{werrs, ferrs} {
		select {
		case err := <-errs:
			t.Fatalf("worker: %v", err)
		default:
		}
	}

	producer, perrs := roleConn(t, ns, "producer")
	pjs, err := jetstream.New(producer)
	require.NoError(t, err)
	ps, err := OpenTimings(ctx, pjs.Conn(), Topology{})
	require.NoError(t, err)
	got, err := ps.Load(ctx)
	require.NoError(t, err)
	require.Equal(t, 12, got[solver.KindImage].N)
	denied(t, perrs, "$KV."+TimingsBucket+"."+solver.KindImage, func(ctx context.Context) error {
		_, err := ps.MergeTimings(ctx, map[string]solver.Learned{solver.KindImage: {Median: time.Hour, Sigma: 0.4, N: 200}})
		return err
	})
}

// TestStatsShowLearnedPlan: without a quota, Stats sums the plan windows the
// workers alive wrote lately; a window older than pool.WindowFresh, or of a
// worker that stopped or sends no heartbeat, does not count.
func TestStatsShowLearnedPlan(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, js.Conn(), b.top, true)
	require.NoError(t, err)
	ts, err := OpenTimings(ctx, js.Conn(), b.top)
	require.NoError(t, err)
	now := time.Now()
	require.NoError(t, ts.PutWindow(ctx, "gone", 40, now.Add(-pool.WindowFresh-time.Second)))
	require.NoError(t, ts.PutWindow(ctx, "w1", 7, now))
	require.NoError(t, ts.PutWindow(ctx, "w2", 8, now))
	require.NoError(t, ts.PutWindow(ctx, "stopped", 100, now))
	require.NoError(t, ts.PutWindow(ctx, "silent", 200, now))
	// Only the workers alive count: w1 and w2 beat, "stopped" said it
	// stopped, "silent" sent no heartbeat.
	for _, wi := range []WorkerInfo{{Name: "w1", Threads: 1, At: now}, {Name: "w2", Threads: 1, At: now}, {Name: "stopped", Threads: 1, At: now, Stopped: true}} {
		b, err := json.Marshal(wi)
		require.NoError(t, err)
		_, err = js.Publish(ctx, wire.HeartbeatSubject(wi.Name), b)
		require.NoError(t, err)
	}
	st, err := b.client.Stats(ctx, 0)
	require.NoError(t, err)
	require.Equal(t, 15, st.LearnedPlan)
	require.Equal(t, 2, st.LearnedPlanWorkers)
}

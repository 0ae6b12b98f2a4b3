package stream

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/internal/upkeep"
)

// followServicePlan has b's admin set the plan quota from the plan the
// service tells the workers until the test ends, as `captchaq server`
// does.
func followServicePlan(t *testing.T, b *bundle, opts ...PlanOption) {
	t.Helper()
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, adm.FollowServicePlan(ctx, nil, opts...))
}

// readPlan is b's plan quota as its stream says it.
func readPlan(t *testing.T, b *bundle) dispatcher.Plan {
	t.Helper()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	p, err := dispatcher.ReadPlan(testContext(t), js)
	require.NoError(t, err)
	return p
}

// planHeld reports whether b's plan quota is p, and its stream holds
// that many threads: the quota was set to the end.
func planHeld(t *testing.T, b *bundle, p dispatcher.Plan) bool {
	t.Helper()
	if readPlan(t, b) != p {
		return false
	}
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	s, err := js.Stream(testContext(t), dispatcher.PlanStream)
	require.NoError(t, err)
	info, err := s.Info(testContext(t))
	require.NoError(t, err)
	return info.State.Msgs == uint64(p.Threads)
}

// burstSolved submits tasks and waits for every one of them solved, each
// paid once at api.
func burstSolved(t *testing.T, b *bundle, api *fakeapi.Server, tasks []Task) {
	t.Helper()
	burstSolvedAtOnce(t, b, api, tasks, 0)
}

// burstSolvedAtOnce is burstSolved, with api holding every captcha
// (fakeapi.Server.Hold) until atOnce of them are at the service together,
// when atOnce is positive: the pool's most captchas at once is then what
// its quota lets it hold, not what the machine's speed lets it reach
// before the first answers free their threads. A pool that never gets
// there fails the burst.
func burstSolvedAtOnce(t *testing.T, b *bundle, api *fakeapi.Server, tasks []Task, atOnce int) {
	t.Helper()
	ctx := testContext(t)
	release := func() {}
	if atOnce > 0 {
		release = api.Hold()
		defer release()
	}
	rs, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	if atOnce > 0 {
		if !assert.Eventually(t, func() bool { return api.Stats().Concurrent >= atOnce }, 30*time.Second, 5*time.Millisecond) {
			t.Fatalf("never %d captchas at the service at once: %+v", atOnce, api.Stats())
		}
		release()
	}
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
		assert.NoError(t, err) // not require: WaitAll's readers call this
		assert.Equal(t, StatusSolved, o.Status)
	}))
	st := api.Stats()
	require.Equal(t, len(tasks), st.Submitted, "each task paid once")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
}

// The plan the service tells the workers is the pool's plan-wide quota:
// the server sets it from their readings before their first task, so
// that a worker with more tasks uses the threads the others leave idle
// (one of 20 threads beside two of one: shares of the plan fixed per
// worker, 2 each, would keep the service at 4 of 6 at most), and never
// more captchas at the service than the plan (no early hand-back here):
// not one capacity refusal.
func TestThePoolHoldsThePlanTheServiceTellsAsOneQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	api := toldAPI(6, "")
	newSolver := newSolverOf(t, api)
	w1 := b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolver, Threads: 20})
	w2 := b.startWorker(t, WorkerConfig{Name: "w2", NewSolver: newSolver, Threads: 1})
	w3 := b.startWorker(t, WorkerConfig{Name: "w3", NewSolver: newSolver, Threads: 1})
	// The whole plan at the service at once: shares fixed per worker
	// never get there.
	burstSolvedAtOnce(t, b, api, pagesBurst("pooled", 60), 6)
	require.Equal(t, dispatcher.Plan{Threads: 6, FromService: true}, readPlan(t, b), "the quota is the service's plan")
	st := api.Stats()
	require.Zero(t, st.Codes[classic.CodeZeroBalance], "no capacity refusal")
	require.Equal(t, 6, st.MaxConcurrent, "the whole plan busy, never more")
	for _, rw := range []*runningWorker{w1, w2, w3} {
		require.True(t, rw.w.SolverClient().PlanTold())
	}
	ps, err := b.client.Stats(testContext(t), time.Hour)
	require.NoError(t, err)
	require.Equal(t, 6, ps.PlanThreads)
	require.True(t, ps.PlanFromService, "stats say the quota is the service's")
}

// A quota an operator set wins over what the service tells: the server
// follows the workers' readings (clients given as the bench gives them,
// reading the service's plan whatever the quota) and leaves it as it is.
func TestOperatorQuotaWinsOverTheServicesReadings(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	require.NoError(t, SetPlan(testContext(t), b.nc, b.top, 2))
	followServicePlan(t, b)
	api := toldAPI(6, "")
	newSolver := newSolverOf(t, api)
	var clients []*solver.Client
	for _, name := range []string{"w1", "w2"} {
		c, err := newSolver(true)
		require.NoError(t, err)
		clients = append(clients, c)
		b.startWorker(t, WorkerConfig{Name: name, Solver: c, Threads: 10})
	}
	burstSolved(t, b, api, pagesBurst("operator", 20))
	for _, c := range clients {
		require.Equal(t, 6, c.PlanToldThreads(), "the workers read the service's plan")
	}
	require.LessOrEqual(t, api.Stats().MaxConcurrent, 2, "the operator's quota holds")
	require.Equal(t, dispatcher.Plan{Threads: 2}, readPlan(t, b), "and stays the operator's")
}

// A service that tells nothing sets no quota: the workers learn the plan
// from its refusals, as without a server that follows.
func TestServiceTellingNothingSetsNoQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b)
	api := toldAPI(3, classic.CodeBadParameters)
	sc := toldBurst(t, b, api, 30)
	require.False(t, sc.PlanTold())
	require.True(t, sc.PlanReached(), "the window learned from refusals")
	require.Zero(t, readPlan(t, b).Threads, "no quota")
}

// The quota follows the latest reading among the workers', up and down,
// whoever read it; a reading older than the one followed changes nothing.
func TestTheQuotaFollowsTheLatestReading(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	followServicePlan(t, b, PlanEarly())
	ctx := testContext(t)
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	t0 := time.Now()
	read := func(worker string, told int, at time.Time) {
		require.NoError(t, store.PutPlanWindow(ctx, worker, pool.PlanWindow{Limit: told, Told: told, ToldAt: at, At: time.Now()}))
	}
	quota := func(want int) {
		t.Helper()
		require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: want, Early: true, FromService: true}) },
			10*time.Second, 5*time.Millisecond, "quota %d from the service", want)
	}
	read("w1", 6, t0)
	quota(6)
	read("w2", 9, t0.Add(time.Minute))
	quota(9)
	read("w1", 6, t0) // w1's older reading again, then w3's newest
	read("w3", 4, t0.Add(2*time.Minute))
	quota(4)
	told, accounts := pool.ServiceReading(map[string]pool.PlanWindow{"w1": {Told: 6, ToldAt: t0}, "w3": {Told: 4, ToldAt: t0.Add(2 * time.Minute)}})
	require.Equal(t, [2]int{4, 1}, [2]int{told, accounts})
	// An operator's quota is then the operator's: readings leave it.
	require.NoError(t, SetPlan(ctx, b.nc, b.top, 5))
	read("w1", 8, t0.Add(3*time.Minute))
	read("w2", 8, t0.Add(3*time.Minute))
	require.Equal(t, dispatcher.Plan{Threads: 5}, readPlan(t, b))
}

// Under the shipped nats.conf the server follows the readings with the
// admin's rights alone, and the workers' role writes its reading, finds
// the server's mark and reads the quota with its own: no role is widened.
func TestServicePlanUnderTheShippedRoles(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	anc, aerrs := roleConn(t, ns, "admin")
	adm, err := NewAdmin(anc, AdminConfig{})
	require.NoError(t, err)
	_, err = adm.EnsureTimings(ctx)
	require.NoError(t, err)
	fctx, stop := context.WithCancel(context.Background())
	t.Cleanup(stop)
	require.NoError(t, adm.FollowServicePlan(fctx, nil, PlanEarly()))

	wnc, werrs := roleConn(t, ns, "worker")
	js, err := jetStreamOf(wnc, Topology{})
	require.NoError(t, err)
	store, err := OpenTimings(ctx, wnc, Topology{})
	require.NoError(t, err)
	followed, err := store.PlanFollowed(ctx, time.Now())
	require.NoError(t, err)
	require.True(t, followed, "the worker finds the server's mark")
	require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 7, Told: 7, ToldAt: time.Now(), At: time.Now()}))
	require.Eventually(t, func() bool {
		p, err := dispatcher.ReadPlan(ctx, js)
		require.NoError(t, err)
		return p == dispatcher.Plan{Threads: 7, Early: true, FromService: true}
	}, 10*time.Second, 5*time.Millisecond, "the server set the quota from the worker's reading")
	for _, errs := range []<-chan error{aerrs, werrs} {
		select {
		case err := <-errs:
			t.Fatalf("a permission refused: %v", err)
		default:
		}
	}
}

// A worker's credentials may write any reading beside the plan windows: a
// false one (a huge plan, told in a far future) must neither make the
// server publish that many threads nor outlive the honest readings that
// follow it. The quota is bounded (MaxServicePlan) and a reading or window
// from beyond the server's clock by more than WindowFresh is not one.
func TestAFalseReadingNeitherFloodsNorPinsTheQuota(t *testing.T) {
	t.Parallel()
	b, store := followedStore(t, Topology{})
	ctx := testContext(t)
	future := time.Now().AddDate(100, 0, 0)
	require.NoError(t, store.PutPlanWindow(ctx, "liar", pool.PlanWindow{Limit: 1 << 30, Told: 1 << 30, ToldAt: future, At: future}))
	require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 6, Told: 6, ToldAt: time.Now(), At: time.Now()}))
	if !assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 6, FromService: true}) },
		10*time.Second, 5*time.Millisecond) {
		t.Fatalf("the honest reading is not the quota: %s", planNow(t, b))
	}
	// A huge reading told now is bounded (its threads' publishing is not
	// waited for: 10000 take more than 10 s under -race).
	require.NoError(t, store.PutPlanWindow(ctx, "w2", pool.PlanWindow{Limit: 1 << 30, Told: 1 << 30, ToldAt: time.Now(), At: time.Now()}))
	require.Eventually(t, func() bool {
		return readPlan(t, b) == dispatcher.Plan{Threads: MaxServicePlan, FromService: true}
	}, 10*time.Second, 5*time.Millisecond, "a huge reading is bounded")
}

// planNow says b's plan quota and the threads its stream holds.
func planNow(t *testing.T, b *bundle) string {
	t.Helper()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	s, err := js.Stream(testContext(t), dispatcher.PlanStream)
	if err != nil {
		return err.Error()
	}
	info, err := s.Info(testContext(t))
	require.NoError(t, err)
	return fmt.Sprintf("%+v, %d threads held", readPlan(t, b), info.State.Msgs)
}

// An operator sets the quota while the server sets the service's from a
// reading that lands at the same moment: the operator's wins, and its
// stream holds exactly its threads. Each round clears the quota first
// (`captchaq init --plan-threads 0`), so the service's is being set.
func TestOperatorQuotaSetWhileTheServerFollowsWins(t *testing.T) {
	t.Parallel()
	// In memory under -race: nats-server's file store races a stream's
	// update against a consumer's creation (v2.15.3, filestore.go
	// UpdateConfig and ConsumerStore), which the race detector reports
	// from the embedded broker. On disk, the same moment may answer
	// "meta.inf.tmp: no such file or directory", which EnsurePlan retries.
	b, store := followedStore(t, Topology{Memory: underRace})
	ctx := testContext(t)
	for i := range 15 {
		require.NoError(t, SetPlan(ctx, b.nc, b.top, 0))
		require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 9, Told: 9 + i%2, ToldAt: time.Now(), At: time.Now()}))
		errs := make(chan error, 2)
		go func() { errs <- SetPlan(ctx, b.nc, b.top, 2) }()
		go func() {
			errs <- store.PutPlanWindow(ctx, "w2", pool.PlanWindow{Limit: 9, Told: 9 + i%2, ToldAt: time.Now(), At: time.Now()})
		}()
		for range 2 {
			require.NoError(t, <-errs, "round %d", i)
		}
		if !assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 2}) }, 3*time.Second, 5*time.Millisecond) {
			t.Fatalf("round %d: the operator's quota of 2 is not held: %s", i, planNow(t, b))
		}
	}
}

// An operator's quota set, to its end, between the follower's look at the
// quota (none) and its write of a reading of 9: the follower writes over
// it, then finds the operator's record and puts the operator's quota back.
// The test waits for the follower to say how its reading ended (its log),
// then looks once.
func TestAnOperatorsQuotaSetJustBeforeTheFollowersWriteWins(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	set, logs := followedWithOperatorAtTheWrite(t, b)
	set.arm()
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 9, Told: 9, ToldAt: time.Now(), At: time.Now()}))
	set.wait(t)
	waitLog(t, logs, "plan-wide quota", "an operator set")
	require.True(t, planHeld(t, b, dispatcher.Plan{Threads: 2}), "the operator's quota of 2 is not held: %s", planNow(t, b))
}

// The same moment as the follower removes the service's quota, the
// readings being of two accounts now: the operator's quota set between
// the follower's look (the service's 9) and its removal stands. The test
// waits for the follower's next reading (of one account again), which
// comes after the removal ends, then looks once.
func TestAnOperatorsQuotaSetJustBeforeTheFollowersRemovalWins(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	set, logs := followedWithOperatorAtTheWrite(t, b)
	store, err := OpenTimings(ctx, b.nc, b.top)
	require.NoError(t, err)
	read := func(worker, account string) {
		t.Helper()
		require.NoError(t, store.PutPlanWindow(ctx, worker, pool.PlanWindow{Limit: 9, Told: 9, ToldAt: time.Now(), Account: account, At: time.Now()}))
	}
	read("w1", "a")
	waitLog(t, logs, "plan-wide quota set")
	set.arm()
	read("w2", "b")
	set.wait(t)
	read("w2", "a")
	waitLog(t, logs, "the workers' readings are of one account again")
	require.True(t, planHeld(t, b, dispatcher.Plan{Threads: 2}), "the operator's quota of 2 is not held: %s", planNow(t, b))
}

// operatorAtTheWrite sets an operator's quota of 2 (SetPlan), to its end,
// when a follower is about to write the service's quota, once it is
// armed.
type operatorAtTheWrite struct {
	armed atomic.Bool
	once  sync.Once
	done  chan error
}

func (o *operatorAtTheWrite) arm() { o.armed.Store(true) }

// wait waits for the operator's quota set, and requires it set.
func (o *operatorAtTheWrite) wait(t *testing.T) {
	t.Helper()
	select {
	case err := <-o.done:
		require.NoError(t, err)
	case <-testContext(t).Done():
		t.Fatal("the follower never came to write the service's quota")
	}
}

// followedWithOperatorAtTheWrite has b's admin follow the service's
// readings until the test ends, an operator's quota set at its write
// once armed; its log's records at Info and above go to the returned
// records.
func followedWithOperatorAtTheWrite(t *testing.T, b *bundle) (*operatorAtTheWrite, records) {
	t.Helper()
	ctx := testContext(t)
	o := &operatorAtTheWrite{done: make(chan error, 1)}
	fctx, cancel := context.WithCancel(topology.WithServiceWriteHook(context.Background(), func() {
		if o.armed.Load() {
			o.once.Do(func() { o.done <- SetPlan(ctx, b.nc, b.top, 2) })
		}
	}))
	t.Cleanup(cancel)
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	logs := newRecords(slog.LevelInfo)
	require.NoError(t, adm.FollowServicePlan(fctx, slog.New(logs)))
	return o, logs
}

// waitLog waits for a record in logs whose message starts with one of
// prefixes.
func waitLog(t *testing.T, logs records, prefixes ...string) {
	t.Helper()
	for {
		select {
		case r := <-logs.c:
			for _, p := range prefixes {
				if strings.HasPrefix(r.Message, p) {
					return
				}
			}
		case <-testContext(t).Done():
			t.Fatalf("the follower never said %q", prefixes)
		}
	}
}

// followedStore is a pool whose server follows the service's readings,
// and the timings bucket a worker writes its readings into.
func followedStore(t *testing.T, top Topology) (*bundle, *Timings) {
	t.Helper()
	b := setup(t, top)
	followServicePlan(t, b)
	store, err := OpenTimings(testContext(t), b.nc, b.top)
	require.NoError(t, err)
	return b, store
}

// A server that followed the readings and is gone (killed, or the pool
// moved to a plain nats-server) leaves no wait at each worker's start: the
// follower's mark says when it last followed, and one older than
// PlanFollowerFresh is no follower. Here the server followed and stopped
// 10 minutes ago (its last mark, on the broker's clock); a worker then
// solves its first task without waiting QuotaWait for a quota no one
// sets, paid once.
func TestAGoneFollowerLeavesNoWaitAtAWorkersStart(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	fctx, gone := context.WithCancel(context.Background())
	require.NoError(t, adm.FollowServicePlan(fctx, nil))
	gone()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	require.NoError(t, topology.MarkPlanFollower(testContext(t), js, time.Now().Add(-10*time.Minute)))
	api := toldAPI(6, "")
	start := time.Now()
	b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 2})
	burstSolved(t, b, api, pagesBurst("gone", 1))
	require.Less(t, time.Since(start), upkeep.QuotaWait, "the worker waited for a quota no server sets")
	require.Zero(t, readPlan(t, b).Threads, "no quota")
}

// A worker that finds the quota half set (topology.EnsurePlan has made
// the plan stream and its metadata, not yet its consumer) goes on holding
// its own plan window: its plan gate finds no quota to hold there, so a
// worker bounded by the quota instead would be bounded by nothing. Here a
// worker of 20 threads told a plan of 6 keeps 6 at the service at most:
// not one capacity refusal, each task paid once.
func TestAQuotaHalfSetLeavesTheWorkerBoundedByItsWindow(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: dispatcher.PlanStream, Subjects: []string{dispatcher.PlanSubject},
		MaxMsgs: 6, Discard: jetstream.DiscardNew, Storage: jetstream.MemoryStorage,
		Metadata: map[string]string{dispatcher.PlanMetaThreads: "6", dispatcher.PlanMetaEarly: "false", dispatcher.PlanMetaSource: dispatcher.PlanSourceService}})
	require.NoError(t, err)
	api := toldAPI(6, "")
	b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 20})
	burstSolvedAtOnce(t, b, api, pagesBurst("halfset", 30), 6)
	require.Zero(t, api.Stats().Codes[classic.CodeZeroBalance], "the worker was bounded by neither its window nor the quota")
}

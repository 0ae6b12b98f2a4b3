package stream

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// A quota of 4 shrinks to 2 while the service holds 4 captchas: no held
// thread is removed (the service still has its captcha), 2 of them are
// marked retiring, and their holders remove them as their captchas end.
// From the moment both are gone, the service never holds more than 2, the plan stream ends with exactly 2 threads, and each task is
// paid once.
func TestAQuotaShrunkWhileEveryThreadIsHeldRetiresThemAsTheirCaptchasEnd(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(100 * time.Millisecond)}}, 0.01)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 30})
	release := api.Hold()
	defer release()
	const tasks = 30
	rs, err := b.client.SubmitAll(ctx, pagesBurst("retire", tasks))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 4 }, 30*time.Second, 5*time.Millisecond)

	require.NoError(t, admin.SetPlan(ctx, 2))
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	ps, err := js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	info := ps.CachedInfo()
	require.Equal(t, uint64(4), info.State.Msgs, "no held thread removed")
	require.Len(t, dispatcher.ParseRetiring(info.Config.Metadata), 2, "two held threads retiring")
	require.Equal(t, 4, api.Stats().Concurrent)

	release()
	sctx, stop := context.WithCancel(ctx)
	after := make(chan int, 1)
	go func() {
		most, drained := 0, false
		for sctx.Err() == nil {
			if drained {
				most = max(most, api.Stats().Concurrent)
			} else if s, err := js.Stream(sctx, dispatcher.PlanStream); err == nil && s.CachedInfo().State.Msgs == 2 {
				drained = true // both retiring threads removed: their captchas ended
			}
			time.Sleep(time.Millisecond)
		}
		after <- most
	}()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}))
	stop()
	most := <-after
	ps, err = js.Stream(ctx, dispatcher.PlanStream)
	require.NoError(t, err)
	st := api.Stats()
	t.Logf("quota 4 -> 2 with 4 held: most at once %d, after the old captchas ended %d; plan stream %d threads; paid %d",
		st.MaxConcurrent, most, ps.CachedInfo().State.Msgs, st.Submitted)
	paidOnceAcross(t, tasks, st)
	require.Equal(t, 4, st.MaxConcurrent)
	require.LessOrEqual(t, most, 2, "the smaller quota holds once the captchas of the larger ended")
	require.Equal(t, uint64(2), ps.CachedInfo().State.Msgs, "the retiring threads left the plan")
	n, err := admin.PlanThreads(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
}

// A plan stream made by an earlier version (limits retention), two of its
// 4 threads held, takes the interest retention at the next change in
// place: the held threads stay, and the quota of 3 deletes free ones only.
func TestAnEarlierPlanStreamKeepsItsHeldThreadsAtTheNextChange(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	storage := jetstream.FileStorage
	if underRace {
		storage = jetstream.MemoryStorage
	}
	s, err := js.CreateStream(ctx, jetstream.StreamConfig{Name: dispatcher.PlanStream, Subjects: []string{dispatcher.PlanSubject},
		Retention: jetstream.LimitsPolicy, MaxMsgs: 4, Discard: jetstream.DiscardNew, Storage: storage,
		Metadata: map[string]string{dispatcher.PlanMetaThreads: "4", dispatcher.PlanMetaEarly: "false"}})
	require.NoError(t, err)
	c, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{Durable: dispatcher.PlanConsumer, AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: time.Minute, MaxDeliver: -1, MaxAckPending: -1})
	require.NoError(t, err)
	for i := range 4 {
		_, err := js.Publish(ctx, dispatcher.PlanSubject, []byte(strconv.Itoa(i)))
		require.NoError(t, err)
	}
	batch, err := c.FetchNoWait(2)
	require.NoError(t, err)
	var held []uint64
	for m := range batch.Messages() {
		md, err := m.Metadata()
		require.NoError(t, err)
		held = append(held, md.Sequence.Stream)
	}
	require.Len(t, held, 2)

	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 3))
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, jetstream.InterestPolicy, info.Config.Retention)
	require.Equal(t, uint64(3), info.State.Msgs)
	for _, seq := range held {
		_, err := s.GetMsg(ctx, seq)
		require.NoError(t, err, "held thread %d kept", seq)
	}
}

// Under the shipped nats.conf the admin shrinks a quota whose threads a
// worker holds, and the worker's role removes the retiring ones (an ack):
// no role is widened, nothing refused.
func TestRetiringThreadsUnderTheShippedRoles(t *testing.T) {
	t.Parallel()
	ns := authServer(t)
	ctx := testContext(t)
	anc, aerrs := roleConn(t, ns, "admin")
	adm, err := NewAdmin(anc, AdminConfig{})
	require.NoError(t, err)
	require.NoError(t, adm.SetPlan(ctx, 3))

	wnc, werrs := roleConn(t, ns, "worker")
	js, err := jetStreamOf(wnc, Topology{})
	require.NoError(t, err)
	gate := &dispatcher.PlanGate{JS: js}
	held, err := gate.Acquire(ctx, 3, time.Second, time.Now())
	require.NoError(t, err)
	require.Len(t, held, 3)

	require.NoError(t, adm.SetPlan(ctx, 1))
	plan := func() *jetstream.StreamInfo {
		s, err := js.Stream(ctx, dispatcher.PlanStream)
		require.NoError(t, err)
		return s.CachedInfo()
	}
	require.Equal(t, uint64(3), plan().State.Msgs, "held threads kept")
	require.Len(t, dispatcher.ParseRetiring(plan().Config.Metadata), 2)
	// Given back free (the gate looked before they were retired), the
	// next Acquire removes the retiring ones and hands out the other.
	for _, th := range held {
		th.Release()
	}
	require.Eventually(t, func() bool {
		again, err := gate.Acquire(ctx, 3, 10*time.Millisecond, time.Now())
		if err != nil || len(again) > 1 {
			t.Errorf("acquire: %v; %d threads handed out of a quota of 1", err, len(again))
		}
		for _, th := range again {
			th.Release()
		}
		return plan().State.Msgs == 1
	}, 10*time.Second, 5*time.Millisecond, "the retiring threads removed")
	require.NoError(t, adm.SetPlan(ctx, 2))
	require.Equal(t, uint64(2), plan().State.Msgs)
	for _, errs := range []<-chan error{aerrs, werrs} {
		select {
		case err := <-errs:
			t.Fatalf("a permission refused: %v", err)
		default:
		}
	}
}

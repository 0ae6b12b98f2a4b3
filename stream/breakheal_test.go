package stream

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// The heal (Admin.healPlan) acts on its second look at the plan stream.
// Whatever an admin does between that look and the heal's write must
// stand: the heal puts back lost threads, it never sets a quota. Each
// case loses 2 threads, takes the two equal looks, and has an admin
// change the quota at the heal's write (the service write hook, or just
// after the heal read the operator's record). Broker only: nothing is
// submitted, nothing paid.
func TestBreakTheHealLeavesAChangeMadeAfterItsLook(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		operator int // the quota before: an operator's; 0: the service's of 6
		// change is the admin's change at the heal's write, want what
		// the plan stream must hold after the heal.
		change func(ctx context.Context, t *testing.T, b *bundle, js jetstream.JetStream)
		want   dispatcher.Plan
		// atRecord: the change runs just after the heal read the
		// operator's record, not at the service write hook.
		atRecord bool
	}{
		{"the service's quota removed by an operator", 0, func(ctx context.Context, t *testing.T, b *bundle, _ jetstream.JetStream) {
			require.NoError(t, SetPlan(ctx, b.nc, b.top, 0))
		}, dispatcher.Plan{}, false},
		{"the service's quota lowered by a newer reading", 0, func(ctx context.Context, t *testing.T, b *bundle, js jetstream.JetStream) {
			_, err := topology.EnsureServicePlan(ctx, js, b.top.spec(), 3, false)
			require.NoError(t, err)
		}, dispatcher.Plan{Threads: 3, FromService: true}, false},
		{"an operator's quota removed by the operator", 4, func(ctx context.Context, t *testing.T, b *bundle, _ jetstream.JetStream) {
			require.NoError(t, SetPlan(ctx, b.nc, b.top, 0))
		}, dispatcher.Plan{}, true},
		{"an operator's quota lowered by the operator", 4, func(ctx context.Context, t *testing.T, b *bundle, _ jetstream.JetStream) {
			require.NoError(t, SetPlan(ctx, b.nc, b.top, 2))
		}, dispatcher.Plan{Threads: 2}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{Memory: true})
			ctx := testContext(t)
			js, err := jetStreamOf(b.nc, b.top)
			require.NoError(t, err)
			before := dispatcher.Plan{Threads: 6, FromService: true}
			if c.operator > 0 {
				require.NoError(t, SetPlan(ctx, b.nc, b.top, c.operator))
				before = dispatcher.Plan{Threads: c.operator}
			} else {
				_, err := topology.EnsureServicePlan(ctx, js, b.top.spec(), 6, false)
				require.NoError(t, err)
			}
			require.True(t, planHeld(t, b, before))
			deleteThreads(2)(t, b)
			look, err := topology.LookAtPlan(ctx, js)
			require.NoError(t, err)
			require.Equal(t, 2, look.Lack)

			var once sync.Once
			changed := false
			change := func() { once.Do(func() { c.change(ctx, t, b, js); changed = true }) }
			hctx := ctx
			hjs := js
			if c.atRecord {
				hjs = afterRecordRead{JetStream: js, f: change}
			} else {
				hctx = topology.WithServiceWriteHook(ctx, change)
			}
			adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
			require.NoError(t, err)
			adm.healPlan(hctx, hjs, slog.New(slog.DiscardHandler), look)
			require.True(t, changed, "the admin's change ran at the heal's write")
			if c.want.Threads == 0 {
				require.Equal(t, c.want, readPlan(t, b), "the quota removed stays removed: %s", planState(b))
				return
			}
			require.True(t, planHeld(t, b, c.want),
				"the admin's change stands: want %+v, the plan %s", c.want, planState(b))
		})
	}
}

// afterRecordRead is js whose first read of the operator's record
// (topology.ReadOperatorPlan) runs f after it is answered: an operator's
// change landing just after the heal read the record.
type afterRecordRead struct {
	jetstream.JetStream
	f func()
}

func (j afterRecordRead) Stream(ctx context.Context, name string) (jetstream.Stream, error) {
	s, err := j.JetStream.Stream(ctx, name)
	if name == topology.OperatorPlanStream {
		j.f()
	}
	return s, err
}

// The churn of TestBreakQuotaChurnOverSlowLinksKeepsTheQuotasThreads
// (SetPlan 2 then 4 while two workers over 3-ms links run 200 tasks of
// 30 ms), with the server following and healing every 10 ms as a third
// writer: the heal puts back what the retiring acks lose, never runs the
// service over the largest quota, and the last quota, 2, holds after it
// with its 2 threads. Each task paid once.
func TestBreakTheHealDuringQuotaChurnKeepsTheQuota(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(30 * time.Millisecond)}}, 0.01)
	admin, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	require.NoError(t, admin.SetPlan(ctx, 4))
	follower, err := NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
	require.NoError(t, err)
	follower.healEvery = 10 * time.Millisecond
	var logs logbuf.Buffer
	fctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, follower.FollowServicePlan(fctx, slog.New(slog.NewTextHandler(&logs, nil))))
	startSlowWorkers(t, b, sc, 2, 3*time.Millisecond)
	const tasks = 200
	rs, err := b.client.SubmitAll(ctx, pagesBurst("healchurn", tasks))
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() { done <- b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}) }()
	rounds := 0
churn:
	for {
		select {
		case err := <-done:
			require.NoError(t, err)
			break churn
		default:
		}
		require.NoError(t, admin.SetPlan(ctx, 2))
		require.NoError(t, admin.SetPlan(ctx, 4))
		rounds++
	}
	require.NoError(t, admin.SetPlan(ctx, 2))
	require.Eventually(t, func() bool { return api.Stats().Concurrent == 0 }, 10*time.Second, 5*time.Millisecond)
	st := api.Stats()
	healed := strings.Count(logs.String(), "lacked threads: put back")
	t.Logf("%d rounds of SetPlan(2), SetPlan(4) with the heal every 10 ms (%d heals), then SetPlan(2): most at once %d, paid %d; %s",
		rounds, healed, st.MaxConcurrent, st.Submitted, planState(b))
	paidOnceAcross(t, tasks, st)
	require.LessOrEqual(t, st.MaxConcurrent, 4, "no more than the largest quota")
	require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 2}) }, 5*time.Second, 5*time.Millisecond,
		"the last quota, 2, with its 2 threads: %s", planState(b))
}

// The plan's consumer removed while another consumer is on the plan
// stream (an operator's, watching the threads; it acks nothing): under
// interest retention the threads stay for the other, so the stream
// lacks none of its messages, but no worker can hold one, and each
// worker's gate finds the quota gone and holds its own plan window
// instead. The heal must put the consumer back, and the threads must be
// the quota's 4 again. Nothing is submitted, nothing paid.
func TestBreakTheHealPutsBackThePlansConsumerBesideAnother(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: true})
	ctx := testContext(t)
	require.NoError(t, SetPlan(ctx, b.nc, b.top, 4))
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	_, err = js.CreateConsumer(ctx, dispatcher.PlanStream, jetstream.ConsumerConfig{Durable: "ops-watch", AckPolicy: jetstream.AckExplicitPolicy})
	require.NoError(t, err)
	deletePlanConsumer(t, b)
	var logs logbuf.Buffer
	followLogged(t, b, &logs)
	require.Eventually(t, func() bool { return planConsumerThere(t, b) }, 5*time.Second, 10*time.Millisecond,
		"the plan's consumer put back (25 looks of the heal): %s", planState(b))
	c, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
	require.NoError(t, err)
	require.Equal(t, uint64(4), c.CachedInfo().NumPending, "the quota's 4 threads free to hold: %s", planState(b))
	require.True(t, planHeld(t, b, dispatcher.Plan{Threads: 4}))
}

package stream

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// followLogged is followServicePlan, the follower logging to logs.
func followLogged(t *testing.T, b *bundle, logs *logbuf.Buffer) {
	t.Helper()
	adm, err := NewAdmin(b.nc, AdminConfig{Topology: b.top})
	require.NoError(t, err)
	adm.healEvery = 200 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	require.NoError(t, adm.FollowServicePlan(ctx, slog.New(slog.NewTextHandler(logs, nil))))
}

// The server puts back the threads the plan stream lost, the service's
// quota's and an operator's, and the consumer with them: a thread lost
// (a retiring thread's ack landing after a larger quota took it back,
// TestBreakARetiringAckLandingAfterTheTakeBackLosesAThread) would stay
// lost until the next change, and a stream left with none (its consumer
// gone: under interest retention the threads go with it) would stop the
// pool. Nothing put back runs the service over the quota, and each task
// is paid once.
func TestThePlansLostThreadsArePutBack(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name     string
		operator int // the operator's quota; 0: the service's of 6
		lose     func(t *testing.T, b *bundle)
		// lifts: the worker's gate finds the quota gone meanwhile, and
		// holds its own plan window until it looks again: its captchas
		// then overlap the quota's threads, and the service refuses a
		// few (unpaid; Admin.FollowServicePlan says so).
		lifts bool
	}{
		{"two threads of the service's quota", 0, deleteThreads(2), false},
		{"the consumer of the service's quota", 0, deletePlanConsumer, true},
		{"two threads of an operator's quota", 4, deleteThreads(2), false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			b := setup(t, Topology{})
			ctx := testContext(t)
			want := dispatcher.Plan{Threads: 6, FromService: true}
			if c.operator > 0 {
				require.NoError(t, SetPlan(ctx, b.nc, b.top, c.operator))
				want = dispatcher.Plan{Threads: c.operator}
			}
			var logs logbuf.Buffer
			followLogged(t, b, &logs)
			api := toldAPI(6, "")
			b.startWorker(t, WorkerConfig{Name: "w1", NewSolver: newSolverOf(t, api), Threads: 20, ShareTimingsEvery: 200 * time.Millisecond})
			solvedEach(t, b, pagesBurst("before", 8))
			require.Eventually(t, func() bool { return planHeld(t, b, want) }, 10*time.Second, 5*time.Millisecond, "the quota set")

			c.lose(t, b)
			require.False(t, planHeld(t, b, want), "threads lost")
			require.Eventually(t, func() bool { return planHeld(t, b, want) && planConsumerThere(t, b) }, 20*time.Second, 10*time.Millisecond,
				"the lost threads put back")
			require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the plan-wide quota lacked threads: put back") },
				5*time.Second, 5*time.Millisecond, "said at WARN")

			release := api.Hold()
			rs, err := b.client.SubmitAll(ctx, pagesBurst("after", 30))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return api.Stats().Concurrent >= want.Threads }, 30*time.Second, 5*time.Millisecond,
				"the whole quota at the service at once")
			release()
			require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {
				assert.NoError(t, err)
				assert.Equal(t, StatusSolved, o.Status)
			}))
			st := api.Stats()
			require.Equal(t, 38, st.Submitted, "each task paid once")
			for k, n := range st.PerTask {
				require.Equal(t, 1, n, "task %s paid once", k)
			}
			require.LessOrEqual(t, st.MaxConcurrent, want.Threads, "never more captchas at the service than the quota")
			t.Logf("paid %d, most at once %d, refused %d", st.Submitted, st.MaxConcurrent, st.Codes[classic.CodeZeroBalance])
			if !c.lifts {
				require.Zero(t, st.Codes[classic.CodeZeroBalance])
			}
			require.True(t, planHeld(t, b, want), "the quota as set, no thread more")
		})
	}
}

// deleteThreads deletes n threads from the plan stream, none held, as an
// ack of a thread that should have stayed removes it.
func deleteThreads(n int) func(t *testing.T, b *bundle) {
	return func(t *testing.T, b *bundle) {
		t.Helper()
		ctx := testContext(t)
		js, err := jetStreamOf(b.nc, b.top)
		require.NoError(t, err)
		s, err := js.Stream(ctx, dispatcher.PlanStream)
		require.NoError(t, err)
		info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
		require.NoError(t, err)
		require.Zero(t, info.State.Consumers-1)
		took := 0
		for seq := info.State.FirstSeq; took < n && seq <= info.State.LastSeq; seq++ {
			if !slices.Contains(info.State.Deleted, seq) {
				require.NoError(t, s.DeleteMsg(ctx, seq))
				took++
			}
		}
		require.Equal(t, n, took)
	}
}

// deletePlanConsumer deletes the plan's consumer: its threads go with it.
func deletePlanConsumer(t *testing.T, b *bundle) {
	t.Helper()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	require.NoError(t, js.DeleteConsumer(testContext(t), dispatcher.PlanStream, dispatcher.PlanConsumer))
}

// planConsumerThere reports whether the plan's consumer is there.
func planConsumerThere(t *testing.T, b *bundle) bool {
	t.Helper()
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	_, err = js.Consumer(testContext(t), dispatcher.PlanStream, dispatcher.PlanConsumer)
	return err == nil
}

// planState describes b's plan stream and consumer, for a failure's log.
// It runs in a test's Cleanup, where the test's own context is gone.
func planState(b *bundle) string {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	js, err := jetStreamOf(b.nc, b.top)
	if err != nil {
		return err.Error()
	}
	s, err := js.Stream(ctx, dispatcher.PlanStream)
	if err != nil {
		return "stream: " + err.Error()
	}
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	if err != nil {
		return "stream: " + err.Error()
	}
	out := fmt.Sprintf("stream created %s, metadata %v, retention %v, max msgs %d, state %+v", info.Created.Format(time.RFC3339Nano), info.Config.Metadata, info.Config.Retention, info.Config.MaxMsgs, info.State)
	c, err := s.Consumer(ctx, dispatcher.PlanConsumer)
	if err != nil {
		return out + "; consumer: " + err.Error()
	}
	ci := c.CachedInfo()
	return out + fmt.Sprintf("; consumer created %s, delivered %+v, ack floor %+v, ack pending %d, redelivered %d, waiting %d, pending %d",
		ci.Created.Format(time.RFC3339Nano), ci.Delivered, ci.AckFloor, ci.NumAckPending, ci.NumRedelivered, ci.NumWaiting, ci.NumPending)
}

package upkeep

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/pool"
)

// toldLearner is a learner told a plan of 6 that records the shares it is
// given; the first share set waits for proceed, as a worker's goroutine
// descheduled between its read of the windows and the share may.
type toldLearner struct {
	learner
	shares  chan int
	proceed chan struct{}
	first   sync.Once
	smu     sync.Mutex
	share   int
}

func (l *toldLearner) PlanTold() bool       { return true }
func (l *toldLearner) PlanToldThreads() int { return 6 }
func (l *toldLearner) SharePlan(share int) {
	l.first.Do(func() {
		l.shares <- share
		<-l.proceed
	})
	l.smu.Lock()
	l.share = share
	l.smu.Unlock()
	select {
	case l.shares <- share:
	default:
	}
}

func (l *toldLearner) lastShare() int {
	l.smu.Lock()
	defer l.smu.Unlock()
	return l.share
}

// A worker's share of the told plan follows the windows in the order
// they were written: a share computed from the windows before another
// worker wrote its own, set late, does not replace the one computed from
// that write: w1 holding the whole plan beside w2's share would send the
// service more than its plan.
func TestALateShareDoesNotReplaceANewerOne(t *testing.T) {
	t.Parallel()
	nc, js, store := timingsBroker(t)
	ctx := t.Context()
	le := &toldLearner{shares: make(chan int, 8), proceed: make(chan struct{})}
	l := &Learning{Learner: le, Name: "w1", Now: time.Now, Every: time.Hour, NC: nc, JS: js, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	started := make(chan error, 1)
	go func() { started <- l.Start(context.WithoutCancel(ctx)) }()
	t.Cleanup(l.Stop)
	require.Equal(t, 6, <-le.shares, "w1 alone: the whole plan")
	require.NoError(t, store.PutPlanWindow(ctx, "w2", pool.PlanWindow{Limit: 3, Told: 6, At: time.Now()}))
	// w2's write reaches w1 while w1's first share waits: it sets 3 at
	// once, or (followed in order) after that share.
	select {
	case got := <-le.shares:
		require.Equal(t, 3, got)
	case <-time.After(time.Second):
	}
	close(le.proceed)
	require.NoError(t, <-started)
	require.Eventually(t, func() bool { return le.lastShare() == 3 }, 5*time.Second, 5*time.Millisecond,
		"w1's share of 6 beside w2: %d", le.lastShare())
}

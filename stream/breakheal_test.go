package stream

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

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

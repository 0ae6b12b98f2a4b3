package stream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/topology"
)

// Two operators set the quota at the same moment with no record yet
// (`captchaq init --plan-threads 2` and `--plan-threads 4` on a new
// queue): neither fails for the other's creation of the record, and the
// quota ends as one of them set it.
func TestTwoOperatorsSettingTheFirstQuotaAtOnceBothSucceed(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{Memory: true})
	ctx := testContext(t)
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	failed := 0
	const rounds = 30
	for i := range rounds {
		require.NoError(t, SetPlan(ctx, b.nc, b.top, 0))
		if err := js.DeleteStream(ctx, topology.OperatorPlanStream); err != nil {
			require.ErrorContains(t, err, "not found")
		}
		errs := make(chan error, 2)
		start := make(chan struct{})
		for _, n := range []int{2, 4} {
			go func() {
				<-start
				errs <- topology.SetOperatorPlan(ctx, js, b.top.spec(), topology.OperatorPlan{Threads: n})
			}()
		}
		close(start)
		for range 2 {
			if err := <-errs; err != nil {
				failed++
				t.Logf("round %d: %v", i, err)
			}
		}
	}
	require.Zero(t, failed, "of %d rounds' %d records, %d failed", rounds, 2*rounds, failed)
}

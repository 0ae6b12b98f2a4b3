package stream

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// An operator's SetPlan that recorded its quota (CAPTCHA_PLAN_OPERATOR)
// and then never wrote the plan stream (the process killed, its
// connection lost) leaves the service's quota there: the server that
// follows the readings puts the recorded operator's quota in at the next
// reading, the same as before or a new one, instead of leaving the
// service's old reading in place for good while it says the operator's
// stands.
func TestAnOperatorsQuotaRecordedButNotWrittenIsPutInByTheFollower(t *testing.T) {
	t.Parallel()
	for _, told := range []int{6, 8} {
		t.Run(fmt.Sprintf("next reading %d", told), func(t *testing.T) {
			t.Parallel()
			b, store := followedStore(t, Topology{})
			ctx := testContext(t)
			t0 := time.Now()
			require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 6, Told: 6, ToldAt: t0, At: time.Now()}))
			require.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 6, FromService: true}) },
				10*time.Second, 5*time.Millisecond, "the service's quota")
			js, err := jetStreamOf(b.nc, b.top)
			require.NoError(t, err)
			// SetPlan(2) cut off after its record.
			require.NoError(t, topology.SetOperatorPlan(ctx, js, b.top.spec(), topology.OperatorPlan{Threads: 2}))
			require.NoError(t, store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: told, Told: told, ToldAt: t0.Add(time.Minute), At: time.Now()}))
			if !assert.Eventually(t, func() bool { return planHeld(t, b, dispatcher.Plan{Threads: 2}) }, 5*time.Second, 10*time.Millisecond) {
				t.Fatalf("the operator's recorded quota of 2 is not held after a reading of %d: %s", told, planNow(t, b))
			}
		})
	}
}

package provider_test

import (
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// cents is an amount to the cent.
func cents(x float64) int64 { return int64(math.Round(x * 100)) }

// TestSpendEqualsTheBills runs two producers' tasks on a plan and a
// per-solve fallback, the plan down for part of the run: stats' spend per
// provider and per producer equals what each emulator billed, to the
// cent (and to a millionth), and its solves what each accepted.
func TestSpendEqualsTheBills(t *testing.T) {
	t.Parallel()
	b := startBed(t, 5*time.Millisecond, 5*time.Millisecond)
	env, plan, spare := b.env, b.plan, b.spare
	checkout, err := stream.NewClient(t.Context(), env.Connect(), stream.ClientConfig{Topology: env.Topology, Name: "checkout", Now: env.Now})
	require.NoError(t, err)
	const n = 40
	ids := submit(t, env.Client, "crawler", 0, n/2)
	waitAll(t, env.Client, ids)
	plan.api.SetFaults(fakeapi.Faults{Outage: true})
	ids = append(ids, submit(t, checkout, "checkout", n/2, n/4)...)
	ids = append(ids, submit(t, env.Client, "crawler", 3*n/4, n/4)...)
	outs := waitAll(t, env.Client, ids)
	plan.api.SetFaults(fakeapi.Faults{})

	st, err := env.Client.Stats(t.Context(), 0)
	require.NoError(t, err)
	t.Logf("spend: %+v", st.Spend)
	solves, cost := map[string]int{}, map[string]float64{}
	producerCost := map[string]float64{}
	for _, r := range st.Spend {
		solves[r.Provider] += r.Solves
		cost[r.Provider] += r.Cost
		producerCost[r.Producer] += r.Cost
		if r.Provider == "plan" {
			require.Equal(t, r.Solves, r.PlanSolves, "a plan's solves are plan solves: %+v", r)
		}
	}
	ps, ss := plan.api.Stats(), spare.api.Stats()
	require.Equal(t, n, ps.Submitted+ss.Submitted, "one captcha paid per task")
	require.Positive(t, ss.Submitted, "the fallback solved some")
	require.Equal(t, map[string]int{"plan": ps.Submitted, "spare": ss.Submitted}, solves, "solves per provider")
	require.Equal(t, cents(ss.Spent), cents(cost["spare"]), "the fallback's bill")
	require.InDelta(t, ss.Spent, cost["spare"], 1e-6)
	require.Equal(t, cents(ps.Spent), cents(cost["plan"]), "the plan costs nothing per solve")
	// The same spend by provider and method: one method here, its rows the
	// providers' totals.
	byMethod := map[string]stream.SpendStats{}
	for _, r := range st.SpendByMethod {
		require.Empty(t, r.Producer, "%+v", r)
		byMethod[r.Provider+"/"+r.Method] = r
	}
	require.Len(t, byMethod, 2, "%+v", st.SpendByMethod)
	require.Equal(t, ss.Submitted, byMethod["spare/userrecaptcha"].Solves)
	require.Equal(t, cents(ss.Spent), cents(byMethod["spare/userrecaptcha"].Cost), "the fallback's bill, by method")
	require.Equal(t, ps.Submitted, byMethod["plan/userrecaptcha"].PlanSolves)

	// Each producer's share of the fallback's bill, from the emulator's
	// own count of captchas per task and its price.
	bill := map[string]float64{}
	for _, o := range outs {
		producer := "streamtest-producer"
		var i int
		if _, err := fmt.Sscanf(o.ID, "checkout-%d", &i); err == nil {
			producer = "checkout"
		} else {
			_, err := fmt.Sscanf(o.ID, "crawler-%d", &i)
			require.NoError(t, err)
		}
		key := fakeapi.TaskKey("userrecaptcha", taskParams(i), nil)
		bill[producer] += float64(ss.PerTask[key]) * spareBilling.Per1000["userrecaptcha"] / 1000
	}
	require.Positive(t, bill["checkout"])
	for producer, b := range bill {
		require.Equal(t, cents(b), cents(producerCost[producer]), "producer %s", producer)
		require.InDelta(t, b, producerCost[producer], 1e-6, "producer %s", producer)
	}
}

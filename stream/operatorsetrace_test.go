package stream

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// Two operators set different quotas at the same moment, each from its
// own connection (`captchaq init --plan-threads 2` and `--plan-threads 4`
// at once, or 0, removing the quota, and 4): both calls succeed (neither
// runs out of tries writing over the other's quota, nor waits for the
// answer of a stream the other removed), and once both have returned the
// record of the operator's quota (CAPTCHA_PLAN_OPERATOR) and the quota
// the workers hold (CAPTCHA_PLAN, its metadata and its threads) are the
// same one of the two, so `captchaq stats` shows the quota recorded
// last, and each call tells (PlanHeld) its own quota or the one that
// holds. With the server following the service's plan, a reading of 9
// lands at the same moment: the follower may write the service's quota
// after the operators returned, and puts the recorded one back, so there
// the agreement is waited for (3 s at most).
func TestTwoOperatorsSettingQuotasAtOnceLeaveTheRecordAndThePlanAgreeing(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		quotas [2]int
		follow bool
	}{
		{"2 and 4", [2]int{2, 4}, false},
		{"2 and 4 while the server follows", [2]int{2, 4}, true},
		{"0 and 4", [2]int{0, 4}, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			twoOperatorsAtOnce(t, c.quotas, c.follow)
		})
	}
}

// twoOperatorsAtOnce runs TestTwoOperatorsSettingQuotasAtOnceLeaveTheRecordAndThePlanAgreeing's
// rounds of quotas, with a server following the service's plan when
// follow; each round starts from a quota of 2, or none when a quota is 2.
func twoOperatorsAtOnce(t *testing.T, quotas [2]int, follow bool) {
	// In memory under -race, as TestOperatorQuotaSetWhileTheServerFollowsWins.
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	js, err := jetStreamOf(b.nc, b.top)
	require.NoError(t, err)
	var store *Timings
	if follow {
		followServicePlan(t, b)
		store, err = OpenTimings(ctx, b.nc, b.top)
		require.NoError(t, err)
	}
	var admins [2]*Admin
	for i := range admins {
		admins[i], err = NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
		require.NoError(t, err)
	}
	from := 2
	if quotas[0] == 2 || quotas[1] == 2 {
		from = 0
	}
	// agree says how the record and the plan stand, "" when they agree
	// on one of the two quotas and the plan stream holds its threads.
	agree := func() string {
		rec, err := topology.ReadOperatorPlan(ctx, js)
		require.NoError(t, err)
		plan := readPlan(t, b)
		held := uint64(0)
		if s, err := js.Stream(ctx, dispatcher.PlanStream); err == nil {
			info, err := s.Info(ctx)
			require.NoError(t, err)
			held = info.State.Msgs
		}
		if rec.Threads == plan.Threads && !plan.FromService && held == uint64(plan.Threads) &&
			(plan.Threads == quotas[0] || plan.Threads == quotas[1]) {
			return ""
		}
		return fmt.Sprintf("record %d, plan %+v holding %d threads", rec.Threads, plan, held)
	}
	const rounds = 30
	var apart []string
	for i := range rounds {
		require.NoError(t, admins[0].SetPlan(ctx, from))
		calls := len(admins)
		if follow {
			calls++
		}
		errs := make(chan error, calls)
		start := make(chan struct{})
		var held [2]int
		for j, adm := range admins {
			go func() {
				<-start
				errs <- adm.SetPlan(ctx, quotas[j], PlanHeld(&held[j]))
			}()
		}
		if follow {
			go func() {
				<-start
				errs <- store.PutPlanWindow(ctx, "w1", pool.PlanWindow{Limit: 9, Told: 9 + i%2, ToldAt: time.Now(), At: time.Now()})
			}()
		}
		close(start)
		var failed []string
		for range calls {
			if err := <-errs; err != nil {
				failed = append(failed, err.Error())
			}
		}
		if len(failed) > 0 {
			apart = append(apart, fmt.Sprintf("round %d: %s", i, strings.Join(failed, "; ")))
			continue
		}
		how := agree()
		if follow && how != "" {
			// The follower's write may land after the operators returned.
			assert.Eventually(t, func() bool { how = agree(); return how == "" }, 3*time.Second, 5*time.Millisecond)
		}
		if how != "" {
			apart = append(apart, fmt.Sprintf("round %d: %s", i, how))
			continue
		}
		// The call recorded last tells its own quota, which holds; the
		// other tells its own or that one.
		final := readPlan(t, b).Threads
		if (held[0] != final && held[1] != final) || (held[0] != quotas[0] && held[0] != final) || (held[1] != quotas[1] && held[1] != final) {
			apart = append(apart, fmt.Sprintf("round %d: the calls told %v held, %d holds", i, held, final))
		}
	}
	if len(apart) > 0 {
		t.Fatalf("%d of %d rounds failed or left the record and the plan apart:\n%s", len(apart), rounds, strings.Join(apart, "\n"))
	}
}

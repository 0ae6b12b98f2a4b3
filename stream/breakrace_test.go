package stream

import (
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// Two operators race SetPlan(2) and SetPlan(4) while the pool holds the
// whole quota of 4 at the service (the emulator holds every captcha):
// each flip from 2 back to 4 purges the plan stream and publishes 4 new
// threads, and the workers take them while still holding the old ones.
// The documented overlap is the old holders beside the new quota (4 + 4);
// the rounds must not pile generations on top of that. Not the race's
// doing: one call after the other piles more (27 against 17 at once),
// every change 2 -> 4 purges the plan stream (topology.EnsurePlan) while
// the workers still hold the purged threads' captchas.
func TestBreakRacingOperatorsPileThreadsAtTheService(t *testing.T) {
	if os.Getenv("CAPTCHAQ_KNOWN_HOLES") != "1" {
		t.Skip("known defect, not fixed: CAPTCHAQ_KNOWN_HOLES=1 runs it (fails: 17 racing, 27 one after the other, of a quota of 4)")
	}
	t.Parallel()
	for _, racing := range []bool{true, false} {
		t.Run(fmt.Sprintf("racing=%v", racing), func(t *testing.T) {
			t.Parallel()
			pileThreads(t, racing)
		})
	}
}

// pileThreads runs TestBreakRacingOperatorsPileThreadsAtTheService's
// rounds, the two calls at once when racing, else one after the other.
func pileThreads(t *testing.T, racing bool) {
	b := setup(t, Topology{Memory: underRace})
	ctx := testContext(t)
	api, sc := emulator(t, fakeapi.Config{SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(100 * time.Millisecond)}}, 0.01)
	var admins [2]*Admin
	for i := range admins {
		var err error
		admins[i], err = NewAdmin(b.connect(t), AdminConfig{Topology: b.top})
		require.NoError(t, err)
	}
	require.NoError(t, admins[0].SetPlan(ctx, 4))
	for range 2 {
		b.startWorker(t, WorkerConfig{Solver: sc, Threads: 30})
	}
	release := api.Hold()
	defer release()
	rs, err := b.client.SubmitAll(ctx, pagesBurst("pile", 60))
	require.NoError(t, err)
	require.Eventually(t, func() bool { return api.Stats().Concurrent >= 4 }, 30*time.Second, 5*time.Millisecond)
	const rounds = 5
	for range rounds {
		if !racing {
			require.NoError(t, admins[0].SetPlan(ctx, 2))
			require.NoError(t, admins[1].SetPlan(ctx, 4))
			continue
		}
		errs := make(chan error, 2)
		for j, n := range []int{2, 4} {
			go func() { errs <- admins[j].SetPlan(ctx, n) }()
		}
		for range 2 {
			require.NoError(t, <-errs)
		}
	}
	require.NoError(t, admins[0].SetPlan(ctx, 4))
	// Held: the count at the service only grows; give the workers 3 s to
	// take whatever threads the plan stream handed out.
	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && api.Stats().Concurrent <= 8 {
		time.Sleep(10 * time.Millisecond)
	}
	st := api.Stats()
	t.Logf("quota 4 (no early hand-back) after %d rounds of 2 and 4: %d captchas at the service at once (paid %d)", rounds, st.MaxConcurrent, st.Submitted)
	release()
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o Outcome, err error) {}))
	paidOnceAcross(t, 60, api.Stats())
	require.LessOrEqual(t, st.MaxConcurrent, 8, "the old quota's holders beside the new quota, no more")
}

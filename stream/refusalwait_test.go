package stream

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A burst's last task, refused because the plan is full, comes back when a
// thread of the plan frees, not when a fixed snooze ends: here the snooze is
// a minute and the thread frees within a second.
func TestPlanRefusalWaitsForAThreadNotAClock(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	// One thread at the service, which does not tell it (threadsinfo
	// answers an error); each captcha holds it 300 ms (30 s at time scale
	// 0.01).
	api := fakeapi.New(fakeapi.Config{Threads: 1, BurstLimit: 1 << 20, ThreadsInfoCode: "ERROR_BAD_PARAMETERS",
		SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(300 * time.Millisecond)}})
	// The plan is not told: the client learns it from the refusal (its
	// window starts at 4), and the second captcha is refused.
	sc := learningClient(t, api)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 2, Policy: retry.Policy{InitialInterval: 50 * time.Millisecond, NoJitter: true,
		CapacityDelay: time.Minute, CapacityMaxDelay: time.Minute}})

	first, last := turnstileTask("first"), turnstileTask("last")
	first.Params["pageurl"], last.Params["pageurl"] = "https://shop.example/first", "https://shop.example/last"
	receipts, err := b.client.SubmitAll(ctx, []Task{first, last})
	require.NoError(t, err)
	// Both solves take 0.6 s in a row; 20 s is room for a loaded machine,
	// and a third of the snooze.
	wctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	solved := 0
	require.NoError(t, b.client.WaitAll(wctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		solved++
	}))
	require.Equal(t, 2, solved)
	st := api.Stats()
	require.Positive(t, st.Codes["ERROR_ZERO_BALANCE"], "the plan refused the second captcha")
	require.Equal(t, 2, st.Submitted, "two captchas paid")
	require.Empty(t, st.Repeated(), "no task paid twice")
}

package stream

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// TestPlanEarlyGivesThreadsBack: with a one-thread quota, a second task
// reaches the service while the first is still being polled only when the
// quota gives threads back early (PlanEarly) and the solver says the first
// is probably solved; without PlanEarly the thread stays held until the
// answer.
func TestPlanEarlyGivesThreadsBack(t *testing.T) {
	t.Parallel()
	for _, early := range []bool{true, false} {
		b := setup(t, Topology{})
		ctx := testContext(t)
		js, err := jetstream.New(b.nc)
		require.NoError(t, err)
		var opts []PlanOption
		if early {
			opts = append(opts, PlanEarly())
		}
		require.NoError(t, SetPlan(ctx, js.Conn(), b.top, 1, opts...))
		entered := make(chan string, 2)
		finish := make(chan struct{})
		b.startWorker(t, WorkerConfig{Threads: 2, Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			solver.ProbablyReady(ctx)
			entered <- req.Params["sitekey"]
			select {
			case <-finish:
			case <-ctx.Done():
				return solver.Answer{}, ctx.Err()
			}
			tok, _ := json.Marshal("tok")
			return solver.Answer{Solution: tok, CaptchaID: "1"}, nil
		})})
		r1, err := b.client.Submit(ctx, turnstileTask("early-1"))
		require.NoError(t, err)
		<-entered
		r2, err := b.client.Submit(ctx, turnstileTask("early-2"))
		require.NoError(t, err)
		if early {
			<-entered // the second is at the service while the first still polls
			close(finish)
		} else {
			// The second waits for the first's thread, which stays held
			// while the first is solved: it enters once the first is
			// answered.
			cons, err := js.Consumer(ctx, dispatcher.PlanStream, dispatcher.PlanConsumer)
			require.NoError(t, err)
			info, err := cons.Info(ctx)
			require.NoError(t, err)
			require.Equal(t, 1, info.NumAckPending, "the first captcha's plan thread was given back before its answer")
			select {
			case <-entered:
				t.Fatal("a second captcha reached the service while the quota's one thread was held")
			default:
			}
			close(finish)
			<-entered
		}
		for _, r := range []Receipt{r1, r2} {
			o, err := b.client.Wait(ctx, r.ID)
			require.NoError(t, err)
			require.Equal(t, StatusSolved, o.Status)
		}
	}
}

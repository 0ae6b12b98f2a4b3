package solver_test

import (
	"context"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// lastReportPool is a Pool with no other clients that tells when the
// Client reports.
type lastReportPool struct {
	mu     sync.Mutex
	last   solver.Occupancy
	n      int
	signal chan struct{}
}

func (p *lastReportPool) Report(o solver.Occupancy) {
	p.mu.Lock()
	p.last, p.n = o, p.n+1
	p.mu.Unlock()
	select {
	case p.signal <- struct{}{}:
	default:
	}
}

func (p *lastReportPool) Others() []solver.Occupancy { return nil }

// TestConfirmUnderFaults: eight callers share a client whose captchas
// are handed back and confirmed, against a service that fails a tenth of
// its replies with HTTP 500, holds a tenth back, refuses submissions over
// a plan of six threads, and answers in 1–8 s (its answers learned in
// 1–6 s), some at the very poll
// that confirms them; a fifth of the callers give up early. No captcha
// makes more res.php calls than MaxCalls, no Solve calls its hook twice,
// every Solve returns, and once all have, the hand-back stops (its last
// report to the pool says nothing is in flight). With batch polling and
// without.
func TestConfirmUnderFaults(t *testing.T) {
	t.Parallel()
	for _, batch := range []bool{false, true} {
		name := "single"
		if batch {
			name = "batch"
		}
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			const scale = 0.02
			const maxCalls = 6
			api := fakeapi.New(fakeapi.Config{Seed: 11, TimeScale: scale, Threads: 6, NoSlotCode: true, BatchPolls: batch, BurstLimit: 1 << 20,
				SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Second, Max: 8 * time.Second}},
				Faults:    fakeapi.Faults{HTTP500: 0.1, Slow: 0.1, SlowDelay: 30 * time.Millisecond}})
			url, stop, err := fakeapi.ServeLocal(api)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				PollErrors: 10, Timing: solver.Timing{Scale: scale, NoBatch: !batch, MaxCalls: maxCalls}})
			if err != nil {
				t.Fatal(err)
			}
			for i := range 40 {
				lo := time.Second + 5*time.Second*time.Duration(i)/40
				c.Observe(solver.KindImage, time.Duration(float64(lo)*scale), time.Duration(float64(lo+time.Second/8)*scale))
			}
			pool := &lastReportPool{signal: make(chan struct{}, 1)}
			c.JoinPool(pool)
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
			defer cancel()
			var solved, twice atomic.Int64
			var wg sync.WaitGroup
			for g := range 8 {
				wg.Go(func() {
					rng := rand.New(rand.NewPCG(uint64(g), 7))
					for solved.Load() < 40 && ctx.Err() == nil {
						sctx, scancel := ctx, context.CancelFunc(func() {})
						if rng.IntN(5) == 0 {
							sctx, scancel = context.WithTimeout(ctx, time.Duration(rng.IntN(100))*time.Millisecond)
						}
						var hooked atomic.Int64
						_, err := c.Solve(solver.WithProbablyReady(sctx, func() { hooked.Add(1) }),
							solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
						scancel()
						if hooked.Load() > 1 {
							twice.Add(1)
						}
						switch {
						case err == nil:
							solved.Add(1)
						case sctx.Err() != nil, solver.ClassOf(err) == retry.Capacity, solver.ClassOf(err) == retry.Transient,
							solver.CodeOf(err) == solver.CodePollLimit, solver.CodeOf(err) == solver.CodeTimeout:
						default:
							t.Errorf("Solve: %v", err)
						}
					}
				})
			}
			wg.Wait()
			st := api.Stats()
			if ctx.Err() != nil {
				t.Fatalf("%d solved before the deadline, want 40; %d in.php calls %d res.php", solved.Load(), st.InCalls, st.ResCalls)
			}
			t.Logf("%d res.php calls (%d batch), most for one captcha %d, %d refused of %d in.php calls",
				st.ResCalls, st.BatchCalls, st.MaxResCallsPerCaptcha, st.Codes["ERROR_NO_SLOT_AVAILABLE"], st.InCalls)
			if st.MaxResCallsPerCaptcha > maxCalls {
				t.Errorf("a captcha got %d res.php calls, want at most MaxCalls (%d)", st.MaxResCallsPerCaptcha, maxCalls)
			}
			if n := twice.Load(); n > 0 {
				t.Errorf("%d solves called their hook more than once", n)
			}
			for {
				pool.mu.Lock()
				last, n := pool.last, pool.n
				pool.mu.Unlock()
				if n > 0 && last == (solver.Occupancy{}) {
					break
				}
				select {
				case <-pool.signal:
				case <-ctx.Done():
					t.Fatalf("the hand-back's last report %+v of %d, want it to say nothing is in flight", last, n)
				}
			}
		})
	}
}

package solver_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// scaledEmulator serves an emulator at time scale, in.php limits scaled
// alike, and returns it with a client whose timing runs at the same scale.
func scaledEmulator(t *testing.T, cfg fakeapi.Config, scale float64, learnPlan bool) (*fakeapi.Server, *solver.Client) {
	t.Helper()
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	cfg.TimeScale, cfg.BurstWindow, cfg.BanTime = scale, s(3*time.Second), s(10*time.Second)
	api := fakeapi.New(cfg)
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, LearnPlan: learnPlan,
		MinSubmitInterval: s(solver.DefaultMinSubmitInterval), SubmitWindow: s(solver.DefaultSubmitWindow),
		Timing: solver.Timing{Scale: scale, NoBatch: true}})
	if err != nil {
		t.Fatal(err)
	}
	return api, c
}

// TestLearnsUnconfiguredPlan: 40 callers share a client against a 10-thread
// plan nobody told it. The plan window keeps the refusals a small share of
// in.php calls and settles near the plan.
func TestLearnsUnconfiguredPlan(t *testing.T) {
	t.Parallel()
	api, c := scaledEmulator(t, fakeapi.Config{Seed: 5, Threads: 10, NoSlotCode: true,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Second, Max: 3 * time.Second}}}, 0.02, true)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var solved atomic.Int64
	var wg sync.WaitGroup
	for range 40 {
		wg.Go(func() {
			for solved.Load() < 400 {
				_, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
				switch {
				case err == nil:
					solved.Add(1)
				case solver.ClassOf(err) != retry.Capacity:
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := api.Stats()
	refused := st.Codes["ERROR_NO_SLOT_AVAILABLE"]
	share := float64(refused) / float64(st.InCalls)
	t.Logf("%d in.php calls, %d refused (%.1f %%); window %d; most at once %d", st.InCalls, refused, 100*share, c.PlanWindow(), st.MaxConcurrent)
	if share > 0.15 {
		t.Errorf("%.1f %% of in.php calls refused, want ≤ 15 %%", 100*share)
	}
	// The window found the plan (the service's threads all busy at once),
	// and ends within reach of it: each refusal cuts it by a fifth, and
	// small windows regrow slowly (window.go), so where it ends depends on
	// when the last refusals came, which a loaded machine shifts. How much of
	// the plan the window keeps busy is the bench's figure (`-only ttt`).
	if st.MaxConcurrent < 10 {
		t.Errorf("at most %d captchas at the service at once, want the plan of 10 reached", st.MaxConcurrent)
	}
	if w := c.PlanWindow(); w < 4 || w > 20 {
		t.Errorf("plan window %d, want near the plan of 10", w)
	}
}

// TestProbablyReadyHook: once a kind is learned, Solve calls the
// WithProbablyReady function before it returns the answer; before, never.
// The client polls each captcha once, at 10 s: with more polls to make, a
// lone captcha probably done is asked about (the hand-back's confirming
// poll) and its answer comes before the hook would.
func TestProbablyReadyHook(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{Seed: 6, TimeScale: 0.02,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: 3 * time.Second, Max: 4 * time.Second}}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: 0.02, NoBatch: true, Fixed: true, MaxCalls: 1,
			FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	req := solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}
	called := 0
	hooked := solver.WithProbablyReady(ctx, func() { called++ })
	if _, err := c.Solve(hooked, req); err != nil {
		t.Fatal(err)
	}
	if called != 0 {
		t.Fatalf("the hook was called %d times for a kind not learned yet", called)
	}
	for range 12 {
		if _, err := c.Solve(ctx, req); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 10 {
		before := called
		if _, err := c.Solve(hooked, req); err != nil {
			t.Fatal(err)
		}
		if n := called - before; n > 1 {
			t.Fatalf("solve %d: the hook was called %d times, want at most once", i, n)
		}
	}
	if called < 5 {
		t.Errorf("the hook was called for %d of 10 solves of a learned kind, want most", called)
	}
}

// TestSharedPlanFewRefusals: five clients (five workers on one key), 8
// callers each, against a 10-thread plan nobody told them: each learns a
// share of two or so threads. Refusals stay about a tenth of in.php calls
// once the windows are found, though each window is small (a window growing
// by one a round, as a large one does, was refused a quarter of the time),
// and that is most of what the early hand-back's margin itself costs.
func TestSharedPlanFewRefusals(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	s := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	api := fakeapi.New(fakeapi.Config{Seed: 8, Threads: 10, NoSlotCode: true, TimeScale: scale, BurstWindow: s(3 * time.Second), BanTime: s(10 * time.Second),
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Second, Max: 3 * time.Second}}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var solved atomic.Int64
	var warm fakeapi.Stats
	var warmOnce sync.Once
	var wg sync.WaitGroup
	for range 5 {
		c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, LearnPlan: true,
			MinSubmitInterval: s(solver.DefaultMinSubmitInterval), SubmitWindow: s(solver.DefaultSubmitWindow),
			Timing: solver.Timing{Scale: scale, NoBatch: true}})
		if err != nil {
			t.Fatal(err)
		}
		for range 8 {
			wg.Go(func() {
				for solved.Load() < 600 {
					_, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
					switch {
					case err == nil:
						if solved.Add(1) == 150 {
							warmOnce.Do(func() { warm = api.Stats() })
						}
					case solver.ClassOf(err) != retry.Capacity:
						t.Error(err)
						return
					}
				}
			})
		}
	}
	wg.Wait()
	st := api.Stats()
	refused := st.Codes["ERROR_NO_SLOT_AVAILABLE"] - warm.Codes["ERROR_NO_SLOT_AVAILABLE"]
	calls := st.InCalls - warm.InCalls
	share := float64(refused) / float64(calls)
	t.Logf("after 150 solves: %d in.php calls, %d refused (%.1f %%); most at once %d", calls, refused, 100*share, st.MaxConcurrent)
	if share > 0.14 {
		t.Errorf("%.1f %% of in.php calls refused once the windows were found, want ≤ 14 %%", 100*share)
	}
}

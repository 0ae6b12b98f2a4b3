package solver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// TestLearnsFasterServiceEmulated: against the emulator answering images in
// 0.5–1.3 s (the first poll is at 5 s), 10 solves at a time over HTTP, the
// client learns the faster service from its first 20 answers: later answers
// wait less than half as long to be picked up, as the emulator measures it.
// Time runs at 1/20.
func TestLearnsFasterServiceEmulated(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	api, c := scaledEmulator(t, fakeapi.Config{Seed: 11,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: 500 * time.Millisecond, Max: 1300 * time.Millisecond}}}, scale, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const total, warm = 200, 20
	req := solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}
	var mu sync.Mutex
	var solved int
	var first fakeapi.Stats
	jobs := make(chan struct{}, total)
	for range total {
		jobs <- struct{}{}
	}
	close(jobs)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for range jobs {
				if _, err := c.Solve(ctx, req); err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				if solved++; solved == warm {
					first = api.Stats()
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	last := api.Stats()
	n := last.Pickups - first.Pickups
	if n < total-warm-10 {
		t.Fatalf("%d pickups after the first %d answers, want about %d", n, warm, total-warm)
	}
	lag := (last.PickupLagMean*time.Duration(last.Pickups) - first.PickupLagMean*time.Duration(first.Pickups)) / time.Duration(n)
	calls := float64(last.ResCalls-first.ResCalls) / float64(n)
	t.Logf("mean pickup lag %v (real time) before, %v after %d answers; %.2f res.php per solve after; most res.php for one captcha %d",
		time.Duration(float64(first.PickupLagMean)/scale), time.Duration(float64(lag)/scale), warm, calls, last.MaxResCallsPerCaptcha)
	// The behaviour, not the figure (the 1.5-s target is measured by the
	// bench's fast-service row): the schedule moved well before the first
	// poll, so answers wait less than half as long as they did at first.
	if lag > first.PickupLagMean/2 {
		t.Errorf("mean pickup lag %v after %d answers against %v before: want under half", lag, warm, first.PickupLagMean)
	}
	if last.MaxResCallsPerCaptcha > solver.DefaultMaxCalls {
		t.Errorf("a captcha got %d res.php calls, over %d", last.MaxResCallsPerCaptcha, solver.DefaultMaxCalls)
	}
}

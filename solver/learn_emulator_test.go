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
// client finds the faster service from its first answers and plans for it:
// answers wait far less than the first poll to be picked up, as the
// emulator measures it.
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
	// poll (5 s), so answers wait less than a quarter of it, from the first
	// answers (the early polls of a kind not learned yet) and after.
	firstPoll := time.Duration(float64(solver.DefaultFirstPoll(solver.KindImage)) * scale)
	if lag > firstPoll/4 || first.PickupLagMean > firstPoll/4 {
		t.Errorf("mean pickup lag %v over the first %d answers, %v after: want under %v", first.PickupLagMean, warm, lag, firstPoll/4)
	}
	if last.MaxResCallsPerCaptcha > solver.DefaultMaxCalls {
		t.Errorf("a captcha got %d res.php calls, over %d", last.MaxResCallsPerCaptcha, solver.DefaultMaxCalls)
	}
}

// TestColdStartPicksUpFast: a fresh client against a service answering
// every kind in 0.2–2 s, far sooner than the documented first polls (5 s
// for images, 15 s for reCAPTCHA), picks answers up within about a second
// from its first ones on: while a kind is not learned, each captcha polls
// early too, and the first answers plan the schedule. 60 solves, 10 at a
// time, time at 1/20; the lag is the emulator's (ready → the reply that
// carried the answer). The figure (at most 1 s) is the bench's
// (`bench -only ttt`, its cold-start row); this test holds the behaviour
// with room for a loaded machine: well under half the documented first
// poll of an image (5 s), where a schedule that waits for the documented
// first polls picks answers up 7 s late.
func TestColdStartPicksUpFast(t *testing.T) {
	t.Parallel()
	const scale = 0.25
	fast := fakeapi.Range{Min: 200 * time.Millisecond, Max: 2 * time.Second}
	api, c := scaledEmulator(t, fakeapi.Config{Seed: 5,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: fast, fakeapi.KindRecaptcha: fast}}, scale, false)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const total = 60
	reqs := []solver.Request{
		{Method: "base64", Params: map[string]string{"body": pngB64}},
		{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/login"}},
	}
	jobs := make(chan solver.Request, total)
	for i := range total {
		jobs <- reqs[i%2]
	}
	close(jobs)
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			for req := range jobs {
				if _, err := c.Solve(ctx, req); err != nil {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	st := api.Stats()
	lags := api.PickupLags(0)
	if len(lags) < 20 {
		t.Fatalf("%d pickups, want %d", len(lags), total)
	}
	var first time.Duration
	for _, l := range lags[:20] {
		first += l
	}
	first = time.Duration(float64(first/20) / scale)
	mean := time.Duration(float64(st.PickupLagMean) / scale)
	t.Logf("mean pickup lag %v over the first 20 answers, %v over all %d (real time); %.2f res.php per solve, at most %d for one captcha",
		first, mean, st.Pickups, float64(st.ResCalls)/float64(st.Pickups), st.MaxResCallsPerCaptcha)
	if want := solver.DefaultFirstPoll(solver.KindImage) * 2 / 5; first > want || mean > want {
		t.Errorf("mean pickup lag %v over the first 20 answers, %v over all: want at most %v", first, mean, want)
	}
	if st.MaxResCallsPerCaptcha > solver.DefaultMaxCalls {
		t.Errorf("a captcha got %d res.php calls, over %d", st.MaxResCallsPerCaptcha, solver.DefaultMaxCalls)
	}
}

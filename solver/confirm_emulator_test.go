package solver_test

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// confirmClient serves an emulator solving images in solve (scaled) and
// returns it with a client at the same time scale that polls on the fixed
// schedule (first poll 10 s, then every interval, 5 s when 0, at most
// maxCalls) and has
// learned that images are ready evenly in 2–3 s (scaled): forty answers,
// each seen not ready at some poll and ready at the next.
func confirmClient(t *testing.T, solve fakeapi.Range, interval time.Duration, maxCalls int, maxWait time.Duration) (*fakeapi.Server, *solver.Client) {
	t.Helper()
	const scale = 0.05
	api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: solve}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey,
		Timing: solver.Timing{Scale: scale, NoBatch: true, Fixed: true, PollInterval: interval, MaxCalls: maxCalls,
			FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second},
			MaxWait:   map[string]time.Duration{solver.KindImage: maxWait},
			// Hand-back decisions every 10 ms (0.5 ms at this scale).
			BatchGap: 50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	teachFast(c, solver.KindImage, scale)
	return api, c
}

// TestConfirmBeforeReuse: a captcha whose kind is ready in 2–3 s is
// probably done at 2.6 s, but not surely enough for the margin to hand its
// thread back; the client then asks res.php at once instead of at the
// first scheduled poll (10 s), finds the answer the service had since
// about 1 s, and returns it, having called res.php once, as the schedule
// would. Waiting for the schedule, the answer came at 10 s.
func TestConfirmBeforeReuse(t *testing.T) {
	t.Parallel()
	api, c := confirmClient(t, fakeapi.Range{Min: time.Second, Max: 1100 * time.Millisecond}, 0, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	handed := 0
	start := time.Now()
	a, err := c.Solve(solver.WithProbablyReady(ctx, func() { handed++ }),
		solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// 5 s scaled: half the first poll, well past the 3 s of the slowest
	// answer learned.
	if took >= 250*time.Millisecond {
		t.Errorf("the answer came after %v (%.1f s scaled), want before 5 s: the client did not confirm the captcha it counted probably done",
			took, took.Seconds()/0.05)
	}
	if n := api.Stats().ResCallsPerCaptcha[a.CaptchaID]; n != 1 {
		t.Errorf("%d res.php calls for the captcha, want 1: the confirming poll takes the place of the first scheduled one", n)
	}
	if handed > 1 {
		t.Errorf("the thread was handed back %d times, want at most once", handed)
	}
}

// TestConfirmKeepsTheBudget: a captcha slower than every one learned (4 s
// against 2–3 s) is confirmed, found not ready, and confirmed again while
// the client counts it probably done; each confirming poll takes the place
// of a scheduled one, and the last scheduled poll is made at its time: at
// most MaxCalls res.php calls, and the answer still comes.
func TestConfirmKeepsTheBudget(t *testing.T) {
	t.Parallel()
	api, c := confirmClient(t, fakeapi.Range{Min: 4 * time.Second, Max: 4100 * time.Millisecond}, 0, 3, 30*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	a, err := c.Solve(solver.WithProbablyReady(ctx, func() {}),
		solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	if err != nil {
		t.Fatal(err)
	}
	n := api.Stats().ResCallsPerCaptcha[a.CaptchaID]
	t.Logf("%d res.php calls", n)
	if n > 3 {
		t.Errorf("%d res.php calls for the captcha, want at most MaxCalls (3)", n)
	}
}

// teachFast teaches c that captchas of kind are ready evenly in 2–3 s (at
// time scale scale), each seen not ready just before: forty answers.
func teachFast(c *solver.Client, kind string, scale float64) {
	for i := range 40 {
		lo := 2*time.Second + time.Second*time.Duration(i)/40
		c.Observe(kind, time.Duration(float64(lo)*scale), time.Duration(float64(lo+time.Second/40)*scale))
	}
}

// TestConfirmLeavesTheScheduleItsTime: a captcha slower than every one
// learned (4 s against 2–3 s) is confirmed and found not ready, the
// confirm taking its first scheduled poll (10 s); with only its last polls
// left (50 and 90 s), it is confirmed at most once a poll interval. Asked
// again at every decision, it spent its polls of 10 and 50 s within a
// second, before it was ready, and its answer waited for the poll at 90 s. A learned schedule keeps its last polls for the rest of MaxWait:
// in a burst, the captcha that ended it waited there for 100 s.
func TestConfirmLeavesTheScheduleItsTime(t *testing.T) {
	t.Parallel()
	api, c := confirmClient(t, fakeapi.Range{Min: 4 * time.Second, Max: 4100 * time.Millisecond}, 40*time.Second, 0, 0)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	a, err := c.Solve(solver.WithProbablyReady(ctx, func() {}),
		solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("answer after %.1f s (scaled), %d res.php calls", took.Seconds()/0.05, api.Stats().ResCallsPerCaptcha[a.CaptchaID])
	// 70 s scaled: past the second scheduled poll (50 s), short of the
	// third (90 s).
	if took >= 3500*time.Millisecond {
		t.Errorf("the answer came after %.1f s (scaled), want before 70 s: confirms spent the schedule's polls ahead of their time", took.Seconds()/0.05)
	}
}

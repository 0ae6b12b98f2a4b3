package solver_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// TestLongTailPollsUntilMaxWait: images learned with a median of 3 s and
// a long tail (log-normal, σ 1.3) get an adaptive schedule whose last
// planned poll falls a fraction of a grid step past MaxWait (120 s). A
// captcha ready at 110 s, within MaxWait, must still be fetched, at the
// deadline at the latest, not given up at the poll before (103 s) with
// CodeTimeout.
func TestLongTailPollsUntilMaxWait(t *testing.T) {
	t.Parallel()
	const scale = 0.01
	sc := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	api := fakeapi.New(fakeapi.Config{Seed: 3, TimeScale: scale, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindImage: {Min: 110 * time.Second, Max: 110 * time.Second}}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		Timing: solver.Timing{Scale: scale, NoBatch: true}})
	if err != nil {
		t.Fatal(err)
	}
	// A hundred answers at the quantiles of that log-normal, each seen in
	// the last tenth of its ready time.
	for i := range 100 {
		z := math.Sqrt2 * math.Erfinv(2*(float64(i)+0.5)/100-1)
		r := time.Duration(3 * math.Exp(1.3*z) * float64(time.Second))
		c.Observe(solver.KindImage, sc(r-r/10), sc(r))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := time.Now()
	_, err = c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	if err != nil {
		t.Fatalf("Solve after %.0f s (scaled): %v, want the answer ready at 110 s, within MaxWait (120 s)",
			time.Since(start).Seconds()/scale, err)
	}
}

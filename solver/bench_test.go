package solver_test

import (
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// benchScale runs the benchmark at 1/50 of real time: the emulator's default
// solve-time distributions (reCAPTCHA median 18 s, Turnstile 6 s, …) and the
// client's timing (first poll, 5-s interval, rate limit) shrink alike, so the
// figures, scaled back, are those of a real-time run.
const benchScale = 0.02

// BenchmarkPolling solves captchas of each kind against the emulator with the
// default solve-time distributions, with fixed 5-s polling and with adaptive
// polling, and reports per solve: pickup lag (ready → fetched, in real-time
// seconds, as the emulator measures it) and res.php calls.
//
//	go test -run '^$' -bench BenchmarkPolling -benchtime 3x ./solver/
func BenchmarkPolling(b *testing.B) {
	kinds := []struct {
		name string
		req  solver.Request
	}{
		{"recaptcha", recaptcha("https://shop.example/login")},
		{"turnstile", turnstile("https://shop.example/checkout")},
		{"geetest", geetest("https://shop.example/")},
		{"image", solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}},
	}
	for _, k := range kinds {
		for _, m := range []struct {
			name   string
			timing solver.Timing
		}{
			{"fixed5s", solver.Timing{Fixed: true, NoBatch: true}},
			{"adaptive", solver.Timing{NoBatch: true}},
			{"batch", solver.Timing{}},
		} {
			m.timing.Scale = benchScale
			// The batch rows need an emulator that answers multi-id polls,
			// which CaptchaAI does not document (fakeapi.Config.BatchPolls).
			batchPolls := m.name == "batch"
			b.Run(k.name+"/"+m.name, func(b *testing.B) { benchPolling(b, k.req, m.timing, batchPolls) })
		}
	}
}

func benchPolling(b *testing.B, req solver.Request, timing solver.Timing, batchPolls bool) {
	const (
		warmup      = 80  // solves to learn from before measuring
		perIter     = 120 // solves per benchmark iteration
		concurrency = 40
	)
	api := fakeapi.New(fakeapi.Config{Seed: 7, TimeScale: benchScale, BatchPolls: batchPolls,
		BurstWindow: time.Duration(float64(3*time.Second) * benchScale)})
	srv := httptest.NewServer(api)
	defer srv.Close()
	c, err := solver.NewClient(solver.Config{
		BaseURL: srv.URL, APIKey: fakeapi.TestKey,
		Timing:            timing,
		MinSubmitInterval: time.Duration(float64(solver.DefaultMinSubmitInterval) * benchScale),
		SubmitWindow:      time.Duration(float64(solver.DefaultSubmitWindow) * benchScale),
	})
	if err != nil {
		b.Fatal(err)
	}
	run := func(n int) {
		var wg sync.WaitGroup
		sem := make(chan struct{}, concurrency)
		for range n {
			sem <- struct{}{}
			wg.Go(func() {
				defer func() { <-sem }()
				if _, err := c.Solve(context.Background(), req); err != nil {
					b.Errorf("Solve: %v", err)
				}
			})
		}
		wg.Wait()
	}
	run(warmup)
	before := api.Stats()
	b.ResetTimer()
	for range b.N {
		run(perIter)
	}
	b.StopTimer()
	after := api.Stats()
	solved := after.Solved - before.Solved
	if solved == 0 {
		b.Fatal("nothing solved")
	}
	lagSum := after.PickupLagMean*time.Duration(after.Pickups) - before.PickupLagMean*time.Duration(before.Pickups)
	lag := lagSum.Seconds() / float64(after.Pickups-before.Pickups) / benchScale
	b.ReportMetric(lag, "lag-s/solve")
	b.ReportMetric(float64(after.ResCalls-before.ResCalls)/float64(solved), "res-calls/solve")
	b.ReportMetric(0, "ns/op") // wall time is the scaled solve time, not a cost
}

package solver_test

import (
	"context"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// fixedPool is a Pool whose other clients always report others; it keeps
// what the Client reports.
type fixedPool struct {
	others   []solver.Occupancy
	mu       sync.Mutex
	reported []solver.Occupancy
}

func (p *fixedPool) Report(o solver.Occupancy) {
	p.mu.Lock()
	p.reported = append(p.reported, o)
	p.mu.Unlock()
}

func (p *fixedPool) Others() []solver.Occupancy { return p.others }

// TestPoolNonsenseIgnored: a Pool that returns reports no client can make
// (not a number, infinite, a trillion free threads) does not stop the
// Client's hand-back nor hold it: a captcha far slower than its kind's
// answers is handed back once the Client counts it done, as if the pool
// were empty, and the Client reports only finite numbers.
func TestPoolNonsenseIgnored(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		others []solver.Occupancy
	}{
		{"nan", []solver.Occupancy{{V: math.NaN(), Free: math.NaN()}}},
		{"inf", []solver.Occupancy{{V: math.Inf(1), Free: math.Inf(-1)}}},
		{"huge", []solver.Occupancy{{V: 1, Free: 1e12}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, c := confirmClient(t, fakeapi.Range{Min: time.Hour, Max: time.Hour}, 0, 0, 0)
			pool := &fixedPool{others: tc.others}
			c.JoinPool(pool)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			handed := make(chan struct{})
			done := make(chan error, 1)
			go func() {
				_, err := c.Solve(solver.WithProbablyReady(ctx, func() { close(handed) }),
					solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
				done <- err
			}()
			// Counted done at about 3 s (150 ms here).
			deadline := time.NewTimer(2 * time.Second)
			defer deadline.Stop()
			select {
			case <-handed:
			case err := <-done:
				t.Fatalf("Solve ended before the hand-back: %v", err)
			case <-deadline.C:
				t.Fatalf("the captcha was not handed back within 40 s (scaled) of a kind ready in 2–3 s")
			}
			cancel()
			<-done
			pool.mu.Lock()
			defer pool.mu.Unlock()
			for _, r := range pool.reported {
				if math.IsNaN(r.V) || math.IsInf(r.V, 0) || math.IsNaN(r.Free) || math.IsInf(r.Free, 0) {
					t.Fatalf("reported %+v to the pool, want finite numbers", r)
				}
			}
		})
	}
}

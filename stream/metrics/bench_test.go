package metrics

import (
	"io"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// BenchmarkObserve is the cost a worker pays per solved task: its steps
// and its API calls counted.
func BenchmarkObserve(b *testing.B) {
	m := NewWorker(8)
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			m.Observe(stream.Observation{Kind: stream.EventAttempt, Method: "turnstile"})
			m.SolverCall(solver.Call{Op: "in.php", Code: "OK", Duration: 100 * time.Millisecond})
			m.SolverCall(solver.Call{Op: "res.php", Code: "OK", Batch: true, Duration: 80 * time.Millisecond})
			m.Observe(stream.Observation{Kind: stream.EventSolved, Method: "turnstile", Duration: 12 * time.Second})
		}
	})
}

// BenchmarkScrape is one /metrics scrape of a worker's registry.
func BenchmarkScrape(b *testing.B) {
	m := NewWorker(8)
	for _, method := range []string{"turnstile", "userrecaptcha", "geetest"} {
		m.Observe(stream.Observation{Kind: stream.EventSolved, Method: method, Duration: 12 * time.Second})
		m.SolverCall(solver.Call{Op: "res.php", Code: "CAPCHA_NOT_READY", Duration: 80 * time.Millisecond})
	}
	b.ReportAllocs()
	for b.Loop() {
		if err := m.Registry().WriteText(io.Discard); err != nil {
			b.Fatal(err)
		}
	}
}

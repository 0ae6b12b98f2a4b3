package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// QueueStats is the state of one lane and priority.
type QueueStats struct {
	Lane     Lane   `json:"lane"`
	Priority string `json:"priority"`
	// Queued is how many tasks wait for a worker.
	Queued uint64 `json:"queued"`
	// InFlight is how many are held by workers now (solving, or waiting out
	// a retry delay).
	InFlight int `json:"in_flight"`
	// Limit is the most that may be in flight at once.
	Limit int `json:"limit"`
	// OldestQueued is the age of the oldest waiting task.
	OldestQueued time.Duration `json:"oldest_queued_ns"`
}

// MethodStats are solve times of one method.
type MethodStats struct {
	Solved int     `json:"solved"`
	P50    float64 `json:"p50_seconds"`
	P95    float64 `json:"p95_seconds"`
}

// Stats is a snapshot of the queue and of recent outcomes.
type Stats struct {
	At     time.Time    `json:"at"`
	Queues []QueueStats `json:"queues"`
	// Window is how far back the outcome counts reach.
	Window   time.Duration          `json:"window_ns"`
	Solved   int                    `json:"solved"`
	Dead     int                    `json:"dead"`
	ByReason map[string]int         `json:"dead_by_reason"`
	ByMethod map[string]MethodStats `json:"by_method"`
	// PerMinute is solved tasks per minute over the window.
	PerMinute float64 `json:"solved_per_minute"`
}

// Stats reads the queue from the workers' consumers and the outcomes of the
// last window from the stream.
func (c *Client) Stats(ctx context.Context, window time.Duration) (Stats, error) {
	now := c.cfg.Now()
	st := Stats{At: now, Window: window, ByReason: map[string]int{}, ByMethod: map[string]MethodStats{}}
	for _, wc := range workerConsumers() {
		cons, err := c.s.Consumer(ctx, consumerName(wc.lane, wc.priority))
		if err != nil {
			return st, fmt.Errorf("consumer %s: %w (no worker has started yet?)", consumerName(wc.lane, wc.priority), err)
		}
		info := cons.CachedInfo()
		q := QueueStats{Lane: wc.lane, Priority: wc.priority, Queued: info.NumPending, InFlight: info.NumAckPending, Limit: info.Config.MaxAckPending}
		if info.NumPending > 0 {
			if m, err := c.s.GetMsg(ctx, info.Delivered.Stream+1, jetstream.WithGetMsgSubject(info.Config.FilterSubject)); err == nil {
				q.OldestQueued = now.Sub(m.Time)
			}
		}
		st.Queues = append(st.Queues, q)
	}
	times := map[string][]float64{}
	start := now.Add(-window)
	cfg := []string{subjectResults + ".>"}
	err := scanSince(ctx, c.s, cfg, start, func(m jetstream.Msg) {
		var o Outcome
		if json.Unmarshal(m.Data(), &o) != nil {
			return
		}
		switch o.Status {
		case StatusSolved:
			st.Solved++
			times[o.Method] = append(times[o.Method], o.SolveSeconds)
		case StatusDead:
			st.Dead++
			st.ByReason[o.Reason]++
		}
	})
	if err != nil {
		return st, err
	}
	for m, ts := range times {
		slices.Sort(ts)
		st.ByMethod[m] = MethodStats{Solved: len(ts), P50: Percentile(ts, 0.50), P95: Percentile(ts, 0.95)}
	}
	if window > 0 {
		st.PerMinute = float64(st.Solved) / window.Minutes()
	}
	return st, nil
}

// scanSince reads, without following, the messages on subjects stored since t.
func scanSince(ctx context.Context, s jetstream.Stream, subjects []string, t time.Time, fn func(jetstream.Msg)) error {
	return scan(ctx, s, scanOpts{subjects: subjects, startTime: t}, func(m jetstream.Msg) (bool, error) {
		fn(m)
		return false, nil
	})
}

// Percentile returns the p-quantile (0..1) of sorted values by the nearest
// rank; 0 for none.
func Percentile(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p*float64(len(sorted))+0.5) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// The queue's recent history, for a browsing operator (the dashboard): it
// reads what the stream keeps and nothing else, so no metrics store is
// needed.

// HistoryPoint is the queue over one step of a History.
type HistoryPoint struct {
	// At is the end of the step.
	At time.Time `json:"at"`
	// Solved and Dead count the tasks that ended within the step.
	Solved int `json:"solved"`
	Dead   int `json:"dead"`
	// Open counts the tasks submitted and not ended at At: queued,
	// solving or waiting out a retry.
	Open int `json:"open"`
}

// History returns the queue's throughput and depth over [since, now], one
// point per step, oldest first. It is read from the stream: the task
// messages still there, and the events and outcomes stored since since. A
// task whose submission the stream no longer records is counted open from
// since.
func (c *Client) History(ctx context.Context, since time.Time, step time.Duration) ([]HistoryPoint, error) {
	if step <= 0 {
		return nil, errors.New("history: step must be positive")
	}
	now := c.cfg.Now()
	if !since.Before(now) {
		return nil, fmt.Errorf("history: since %s is not before now", since.Format(time.RFC3339))
	}
	type life struct {
		submitted, ended time.Time
		dead             bool
	}
	gens := map[uint64]*life{}
	get := func(gen uint64) *life {
		l := gens[gen]
		if l == nil {
			l = &life{}
			gens[gen] = l
		}
		return l
	}
	// The tasks that wait or run (and those about to leave): their task
	// messages are their submissions.
	err := c.rd.ScanFrom(ctx, taskMessageSubjects(""), 0, false, func(m taskstore.Record) (bool, error) {
		gen, at := wire.TaskMessageGen(m.Header, m.Seq, m.Stored)
		get(gen).submitted = at
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// What happened since: events name their generation's submission, a
	// dead event ends it, an outcome ends it.
	err = c.rd.Scan(ctx, taskstore.ScanOpts{Subjects: []string{wire.SubjectEvents + ".>", wire.SubjectResults + ".>"}, StartTime: since}, func(m taskstore.Record) (bool, error) {
		if m.Subject == wire.ResultSubject(wire.IDFromSubject(m.Subject)) {
			var o struct {
				Status Status `json:"status"`
			}
			if gen := taskstore.GenOf(m.Header); gen > 0 && json.Unmarshal(m.Data, &o) == nil {
				l := get(gen)
				if l.ended.IsZero() {
					l.ended, l.dead = m.Stored, o.Status == StatusDead
				}
			}
			return false, nil
		}
		ev, ok := wire.ParseEvent(m.Data)
		if !ok || ev.Gen == 0 {
			return false, nil
		}
		l := get(ev.Gen)
		if l.submitted.IsZero() && !ev.Submitted.IsZero() {
			l.submitted = ev.Submitted
		}
		if ev.Kind == EventDead && l.ended.IsZero() {
			l.ended, l.dead = m.Stored, true
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	n := int(now.Sub(since)/step) + 1
	points := make([]HistoryPoint, n)
	start := now.Add(-time.Duration(n-1) * step)
	for i := range points {
		points[i].At = start.Add(time.Duration(i) * step)
	}
	// index is the step a moment falls in: the first point at or after it.
	index := func(t time.Time) int {
		if !t.After(start) {
			return 0
		}
		return min(n-1, int((t.Sub(start)+step-1)/step))
	}
	for _, l := range gens {
		if !l.ended.IsZero() && l.ended.Before(since) {
			continue
		}
		from := 0
		if !l.submitted.IsZero() {
			from = index(l.submitted)
			if points[from].At.Before(l.submitted) {
				continue // submitted after the last point
			}
		}
		to := n
		if !l.ended.IsZero() {
			to = index(l.ended)
			if l.dead {
				points[to].Dead++
			} else {
				points[to].Solved++
			}
		}
		for i := from; i < to; i++ {
			points[i].Open++
		}
	}
	return points, nil
}

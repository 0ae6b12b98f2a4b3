package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/quantile"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// What Stats counts in the event logs: the window's outcomes, the attempts
// under way, and the tasks held in a paused lane.

// solvingLookback is how far back stats looks for attempts still under way:
// longer than any solve.
const solvingLookback = 15 * time.Minute

// countOutcomes fills the window's counts from the event logs, with the
// method of each task from its event or its outcome, and counts the attempts
// under way and the tasks held since oldestHeld (zero: none held), however
// far before the window: a task in a lane paused for hours waits there.
func (c *Client) countOutcomes(ctx context.Context, st *Stats, start, oldestHeld time.Time) (map[string]TaskStatus, error) {
	type ended struct {
		id string
		ev statsEvent
	}
	var (
		ends       []ended
		methods    = map[string]string{}
		producers  = map[string]string{}
		last       = map[string]Event{}
		firstSolve time.Time
	)
	from := start
	if lb := st.At.Add(-solvingLookback); !from.IsZero() && lb.Before(from) {
		from = lb
	}
	if !from.IsZero() && !oldestHeld.IsZero() && oldestHeld.Before(from) {
		from = oldestHeld
	}
	subjects := []string{wire.SubjectEvents + ".>", wire.SubjectResults + ".>"}
	err := c.rd.Scan(ctx, taskstore.ScanOpts{Subjects: subjects, StartTime: from}, func(m taskstore.Record) (bool, error) {
		id := wire.IDFromSubject(m.Subject)
		var ev statsEvent
		if strings.HasPrefix(m.Subject, wire.SubjectResults+".") {
			var o Outcome
			if json.Unmarshal(m.Data, &o) != nil {
				return false, nil
			}
			if o.Method != "" {
				methods[id] = o.Method
			}
			if o.Status != StatusSolved {
				return false, nil // the dead event counts it
			}
			// A solved outcome is the record of the solve.
			ev = statsEvent{Kind: EventSolved, At: o.SolvedAt, Seconds: o.SolveSeconds, Method: o.Method, Gen: taskstore.GenOf(m.Header),
				Provider: o.Provider, Cost: o.Cost, CostBasis: o.CostBasis}
		} else if json.Unmarshal(m.Data, &ev) != nil || ev.Kind == EventSolved {
			// A solved event (written by workers before the outcome became
			// the record of a solve) is counted by its outcome.
			return false, nil
		}
		if ev.Method != "" {
			methods[id] = ev.Method
		}
		if ev.Client != "" {
			producers[id] = ev.Client
		}
		last[id] = Event{Kind: ev.Kind, Gen: ev.Gen, At: ev.At, DelayMS: ev.DelayMS}
		if ev.At.Before(start) {
			return false, nil // before the window: only for Solving
		}
		switch ev.Kind {
		case EventRetry:
			st.Failed++
		case EventSnooze:
			st.Snoozed++
		case EventSolved:
			if firstSolve.IsZero() || ev.At.Before(firstSolve) {
				firstSolve = ev.At
			}
			if ev.At.After(st.LastSolve) {
				st.LastSolve = ev.At
			}
			if st.At.Sub(ev.At) <= time.Minute {
				st.LastMinute++
			}
			ends = append(ends, ended{id: id, ev: ev})
		case EventDead:
			ends = append(ends, ended{id: id, ev: ev})
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("stats: %w", err)
	}
	held := map[string]TaskStatus{}
	for id, ev := range last {
		switch status, _ := statusOf(ev, ev.Gen, st.At); status {
		case TaskSolving:
			st.Solving++
			held[id] = status
		case TaskRetrying:
			st.Retrying++
			held[id] = status
		case TaskQueued:
			if ev.Kind == EventRetry || ev.Kind == EventSnooze {
				// Its delay ended and no worker has taken it again yet
				// (its lane is paused, or every thread is busy): the
				// consumer still holds it as in flight, not pending, so
				// countHeld counts it as queued in its queue.
				held[id] = status
			}
		}
	}
	times := map[string][]float64{}
	spend, spendByMethod := spendTally{}, spendTally{}
	for _, e := range ends {
		method := methods[e.id]
		if method == "" {
			method = "unknown"
		}
		ms := st.ByMethod[method]
		if e.ev.Kind == EventSolved {
			st.Solved++
			ms.Solved++
			times[method] = append(times[method], e.ev.Seconds)
			spend.add(e.ev.Provider, producers[e.id], "", e.ev.Cost, e.ev.CostBasis)
			spendByMethod.add(e.ev.Provider, "", method, e.ev.Cost, e.ev.CostBasis)
		} else {
			st.Dead++
			ms.Dead++
			st.ByReason[e.ev.Reason]++
			if e.ev.Code == wire.CodeBudgetExceeded {
				st.DeadOverBudget++
			}
		}
		st.ByMethod[method] = ms
	}
	st.Spend, st.SpendByMethod = spend.rows(), spendByMethod.rows()
	for method, ts := range times {
		slices.Sort(ts)
		ms := st.ByMethod[method]
		ms.P50, ms.P95 = quantile.Of(ts, 0.50), quantile.Of(ts, 0.95)
		st.ByMethod[method] = ms
	}
	if st.Solved > 0 {
		from := firstSolve
		if from.Before(start) {
			from = start
		}
		span := max(st.LastSolve.Sub(from), time.Minute)
		st.PerMinute = float64(st.Solved) / span.Minutes()
	}
	return held, nil
}

// countHeld counts the tasks at the service, those waiting out a delay and
// those due again after one by the queue they came from: one read of each
// one's task message.
func (c *Client) countHeld(ctx context.Context, st *Stats, held map[string]TaskStatus) error {
	at := map[string]int{}
	for i, q := range st.Queues {
		at[string(q.Lane)+"."+string(q.Priority)] = i
	}
	for id, status := range held {
		m, found, err := c.rd.Last(ctx, wire.TaskMessagesFor(id))
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		if !found {
			continue // ended meanwhile
		}
		ti, ok := taskInfoOf(m.Subject, m.Header, nil, m.Seq, m.Stored)
		i, known := at[string(ti.Lane)+"."+string(ti.Priority)]
		if !ok || !known {
			continue
		}
		switch status {
		case TaskSolving:
			st.Queues[i].Solving++
		case TaskRetrying:
			st.Queues[i].Retrying++
		case TaskQueued:
			st.Queues[i].Queued++
			st.Queued++
		}
	}
	return nil
}

// countDeadlinesInPause counts, in each paused queue, the waiting tasks
// whose deadline falls before the pause ends: one read of the queue's task
// messages past its ack floor (floors, by queue), in paused queues alone.
func (c *Client) countDeadlinesInPause(ctx context.Context, st *Stats, held map[string]TaskStatus, floors []uint64) error {
	for i := range st.Queues {
		q := &st.Queues[i]
		if !q.Paused {
			continue
		}
		seen := map[string]bool{} // a task once, whatever copies of its message the stream holds
		subject := wire.TaskFilter(q.Lane, q.Priority)
		err := c.rd.ScanFrom(ctx, []string{subject}, floors[i]+1, false, func(m taskstore.Record) (bool, error) {
			ti, ok := taskInfoOf(m.Subject, m.Header, m.Data, m.Seq, m.Stored)
			if !ok || seen[ti.ID] || held[ti.ID] == TaskSolving || ti.Deadline.IsZero() || !ti.Deadline.Before(q.PausedUntil) {
				return false, nil
			}
			seen[ti.ID] = true
			q.DeadlinesInPause++
			if q.FirstDeadline.IsZero() || ti.Deadline.Before(q.FirstDeadline) {
				q.FirstDeadline = ti.Deadline
			}
			return false, nil
		})
		if err != nil {
			return fmt.Errorf("stats: %w", err)
		}
		st.DeadlinesInPause += q.DeadlinesInPause
		if !q.FirstDeadline.IsZero() && (st.FirstDeadline.IsZero() || q.FirstDeadline.Before(st.FirstDeadline)) {
			st.FirstDeadline = q.FirstDeadline
		}
	}
	return nil
}

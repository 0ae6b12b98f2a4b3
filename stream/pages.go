package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// Reads for a browsing operator (the dashboard): outcomes with when they
// were stored, the queue's recent history, and dead letters chosen by any
// predicate for a replay or a purge. They read what the stream keeps and
// nothing else: no metrics store is needed.

// OutcomeRecord is an outcome with when it was stored, never with its
// token.
type OutcomeRecord struct {
	Outcome
	// At is when the outcome was stored: when the task ended.
	At time.Time `json:"at"`
	// Gen is the generation (task message sequence) it ends.
	Gen uint64 `json:"gen"`
}

// OutcomeRecords returns the outcomes stored since since (zero: all the
// stream keeps), oldest first, without their tokens.
func (c *Client) OutcomeRecords(ctx context.Context, since time.Time) ([]OutcomeRecord, error) {
	var out []OutcomeRecord
	err := scan(ctx, c, scanOpts{subjects: []string{wire.SubjectResults + ".>"}, startTime: since}, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		var o Outcome
		if json.Unmarshal(m.Data(), &o) == nil && o.ID != "" {
			o.Solution, o.UserAgent = nil, ""
			out = append(out, OutcomeRecord{Outcome: o, At: md.Timestamp, Gen: genOf(m.Headers())})
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("outcomes: %w", err)
	}
	return out, nil
}

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
	err := scanFrom(ctx, c, []string{wire.SubjectAllTasks}, 0, false, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		get(md.Sequence.Stream).submitted = md.Timestamp
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("history: %w", err)
	}
	// What happened since: events name their generation's submission, a
	// dead event ends it, an outcome ends it.
	err = scan(ctx, c, scanOpts{subjects: []string{wire.SubjectEvents + ".>", wire.SubjectResults + ".>"}, startTime: since}, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		if m.Subject() == wire.ResultSubject(wire.IDFromSubject(m.Subject())) {
			var o struct {
				Status Status `json:"status"`
			}
			if gen := genOf(m.Headers()); gen > 0 && json.Unmarshal(m.Data(), &o) == nil {
				l := get(gen)
				if l.ended.IsZero() {
					l.ended, l.dead = md.Timestamp, o.Status == StatusDead
				}
			}
			return false, nil
		}
		ev, ok := wire.ParseEvent(m.Data())
		if !ok || ev.Gen == 0 {
			return false, nil
		}
		l := get(ev.Gen)
		if l.submitted.IsZero() && !ev.Submitted.IsZero() {
			l.submitted = ev.Submitted
		}
		if ev.Kind == EventDead && l.ended.IsZero() {
			l.ended, l.dead = md.Timestamp, true
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

// ReplayWhere replays every dead letter keep selects among those not yet
// replayed, the latest letter of each task only (replaying two letters of
// one id would run two generations at once), skipping letters that hold no
// valid task or whose task was submitted again. It stops at the first other
// failure and returns what it replayed so far.
func (c *Client) ReplayWhere(ctx context.Context, keep func(DeadLetter) bool) ([]Receipt, error) {
	ds, err := c.DeadLetters(ctx, DeadFilter{})
	if err != nil {
		return nil, err
	}
	return c.replayLatest(ctx, ds, keep)
}

// PurgeWhere deletes the dead letters keep selects and returns how many,
// as PurgeDead does.
func (c *Client) PurgeWhere(ctx context.Context, keep func(DeadLetter) bool) (int, error) {
	ds, err := c.DeadLetters(ctx, DeadFilter{})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, d := range ds {
		if !keep(d) {
			continue
		}
		// Erased, not only deleted: a dead letter holds the task's page URL.
		if err := c.s.SecureDeleteMsg(ctx, d.Seq); err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return n, fmt.Errorf("purge dead letter %d (%s): %w", d.Seq, d.ID, err)
		}
		n++
	}
	return n, nil
}

package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// What an admin does with dead letters: replay them as new generations of
// their tasks, or purge them.

// Replay puts the latest dead letter of task id back on the queue as a new
// generation of the same task: fresh attempts and a fresh deadline, the same
// id, so Wait(id) gets its outcome. Replaying the same letter twice returns
// ErrAlreadyReplayed and enqueues nothing.
func (a *Admin) Replay(ctx context.Context, id string) (Receipt, error) {
	return withClient(ctx, a, func(c *Client) (Receipt, error) {
		d, err := c.DeadLetterOf(ctx, id)
		if err != nil {
			return Receipt{}, err
		}
		return c.replay(ctx, d)
	})
}

// ReplayAll replays every dead letter that matches f and was not replayed yet.
// It stops at the first failure and returns what it replayed so far.
func (a *Admin) ReplayAll(ctx context.Context, f DeadFilter) ([]Receipt, error) {
	f.Pending = true
	return withClient(ctx, a, func(c *Client) ([]Receipt, error) {
		ds, err := c.DeadLetters(ctx, f)
		if err != nil {
			return nil, err
		}
		return c.replayLatest(ctx, ds, func(DeadLetter) bool { return true })
	})
}

// replayLatest replays the letters of ds that keep selects and that were
// not replayed yet, the latest letter of each task only (replaying two
// letters of one id would run two generations of it at once), skipping
// letters that hold no valid task or whose task was submitted again. It
// stops at the first other failure and returns what it replayed so far.
func (c *Client) replayLatest(ctx context.Context, ds []DeadLetter, keep func(DeadLetter) bool) ([]Receipt, error) {
	latest := map[string]int{}
	for i, d := range ds {
		latest[d.ID] = i
	}
	var out []Receipt
	for i, d := range ds {
		if latest[d.ID] != i || d.Replayed != nil || !keep(d) {
			continue
		}
		r, err := c.replay(ctx, d)
		if errors.Is(err, ErrNotReplayable) || errors.Is(err, ErrSuperseded) {
			continue
		}
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}

// replay queues dead letter d again. It writes its record in two steps: a
// record that the replay started, before anything is queued, and one naming
// the new task message once it is. The first is the rights check: the
// replay records are the admin's (a worker accepts a replay whose letter is
// gone on the strength of one), so a caller who may submit tasks but not
// record replays is refused before anything is queued or paid for. And a
// replay that queued is recorded as one even if the second write never
// happens: the letter reads as replayed, and replaying it again finishes
// the record instead of queueing the task a second time.
func (c *Client) replay(ctx context.Context, d DeadLetter) (Receipt, error) {
	if d.Replayed != nil && d.Replayed.TaskSeq != 0 {
		return Receipt{ID: d.ID, Seq: d.Replayed.TaskSeq, Duplicate: true}, fmt.Errorf("replay %s (dead letter %d): %w at %s",
			d.ID, d.Seq, ErrAlreadyReplayed, d.Replayed.At.Format(time.RFC3339))
	}
	resuming := d.Replayed != nil // started, not known to have queued
	if gen, _, err := c.rd.LatestGen(ctx, d.ID); err == nil && gen > d.Gen {
		if resuming {
			if m, ok, err := c.rd.At(ctx, gen); err == nil && ok && m.Header.Get(wire.HeaderReplayedBy) == strconv.FormatUint(d.Seq, 10) {
				// The started replay did queue it: finish its record.
				return c.recordReplay(ctx, d, Receipt{ID: d.ID, Seq: gen, Duplicate: true})
			}
		}
		return Receipt{}, fmt.Errorf("replay %s (dead letter %d): %w: the task was submitted again since (task message %d)",
			d.ID, d.Seq, ErrSuperseded, gen)
	}
	t, err := ParseTask(d.Task)
	if err == nil {
		err = t.ValidateShape()
	}
	if err != nil {
		return Receipt{}, fmt.Errorf("replay %s (dead letter %d): %w: %v", d.ID, d.Seq, ErrNotReplayable, err)
	}
	// On the broker's clock, as workers judge it; counted, as a
	// submission's, from when the task may start: a task still waiting for
	// its use_at or not_before would otherwise expire before its time.
	now := c.brokerTime(c.cfg.Now())
	t.ID, t.Deadline = d.ID, wire.Latest(now, t.UseAt.From(now), t.NotBefore.From(now)).Add(c.cfg.DefaultDeadline)
	msg, err := c.taskMsg(t)
	if err != nil {
		return Receipt{}, fmt.Errorf("replay %s (dead letter %d): %w", d.ID, d.Seq, err)
	}
	msg.Header.Set(wire.HeaderReplayedBy, strconv.FormatUint(d.Seq, 10))
	// The task's owner, not the operator, may cancel the replay: it holds
	// the secret whose hash the letter kept. A letter without one leaves the
	// replay to the admin's cancel alone.
	msg.Header.Del(wire.HeaderCancelHash)
	if d.CancelHash != "" {
		msg.Header.Set(wire.HeaderCancelHash, d.CancelHash)
	}
	if !resuming {
		started, _ := json.Marshal(Replay{DeadSeq: d.Seq, At: c.cfg.Now(), By: c.cfg.Name})
		rm := nats.NewMsg(wire.ReplaySubject(d.ID))
		rm.Data = started
		rm.Header.Set(wire.HeaderDeadSeq, strconv.FormatUint(d.Seq, 10))
		if _, err := c.w.PublishWithID(ctx, rm, fmt.Sprintf("replaying.%d", d.Seq)); err != nil {
			return Receipt{}, fmt.Errorf("replay %s: nothing queued: recording the replay failed: %w", d.ID, err)
		}
	}
	// The message id names the dead letter: two replays racing enqueue one task.
	ack, err := c.w.PublishWithID(ctx, msg, wire.ReplayMsgID(t.ID, strconv.FormatUint(d.Seq, 10)))
	if err != nil {
		return Receipt{}, fmt.Errorf("replay %s: %w (the replay is recorded as started: replay it again to finish)", d.ID, c.fullError(ctx, err))
	}
	if ack.Duplicate {
		// Anyone who may submit tasks can occupy a message id: make sure
		// the message the stream kept is this replay, as workers will judge
		// it (the letter's task and cancel hash: VerifyReplay). A message
		// of another task would end INVALID_ENVELOPE while the letter read
		// as replayed.
		if kept, ok, err := c.rd.At(ctx, ack.Seq); err != nil || !ok || kept.Subject != msg.Subject ||
			kept.Header.Get(wire.HeaderReplayedBy) != msg.Header.Get(wire.HeaderReplayedBy) ||
			!c.keptIsReplay(ctx, d, kept) {
			return Receipt{}, fmt.Errorf("replay %s (dead letter %d): its message id is taken by another message (%d) "+
				"within the stream's duplicate window; replay again once the window has passed", d.ID, d.Seq, ack.Seq)
		}
	}
	return c.recordReplay(ctx, d, Receipt{ID: d.ID, Seq: ack.Seq, Duplicate: ack.Duplicate})
}

// keptIsReplay reports whether task message kept, holding the message id
// of dead letter d's replay, is one workers take for that replay.
func (c *Client) keptIsReplay(ctx context.Context, d DeadLetter, kept taskstore.Record) bool {
	t, err := ParseTask(kept.Data)
	return err == nil && c.rd.VerifyReplay(ctx, d.ID, kept.Seq, kept.Header, t) == nil
}

// recordReplay writes the record that dead letter d was replayed as task
// message r.Seq.
func (c *Client) recordReplay(ctx context.Context, d DeadLetter, r Receipt) (Receipt, error) {
	rec, _ := json.Marshal(Replay{DeadSeq: d.Seq, TaskSeq: r.Seq, At: c.cfg.Now(), By: c.cfg.Name})
	rm := nats.NewMsg(wire.ReplaySubject(d.ID))
	rm.Data = rec
	rm.Header.Set(wire.HeaderDeadSeq, strconv.FormatUint(d.Seq, 10))
	if _, err := c.w.PublishWithID(ctx, rm, fmt.Sprintf("replayed.%d", d.Seq)); err != nil {
		// The task is queued again, and the started record says so; only
		// the final record failed. Say both.
		return r, fmt.Errorf("replay %s: the task is queued again (task message %d), but recording it failed: %w; replay it again to finish the record",
			d.ID, r.Seq, err)
	}
	return r, nil
}

// PurgeDead deletes the dead letters that match f and returns how many. The
// tasks' event logs stay for the audit retention.
func (a *Admin) PurgeDead(ctx context.Context, f DeadFilter) (int, error) {
	ds, err := a.DeadLetters(ctx, f)
	if err != nil {
		return 0, err
	}
	return a.PurgeDeadLetters(ctx, ds)
}

// PurgeDeadLetters deletes exactly the dead letters ds (as DeadLetters
// listed them: by their stream sequence, so a letter that arrived since the
// listing stays) and returns how many. The tasks' event logs stay for the
// audit retention.
func (a *Admin) PurgeDeadLetters(ctx context.Context, ds []DeadLetter) (int, error) {
	return a.purgeLetters(ctx, ds, func(DeadLetter) bool { return true })
}

// ReplayWhere replays every dead letter keep selects among those not yet
// replayed, the latest letter of each task only (replaying two letters of
// one id would run two generations at once), skipping letters that hold no
// valid task or whose task was submitted again. It stops at the first other
// failure and returns what it replayed so far.
func (a *Admin) ReplayWhere(ctx context.Context, keep func(DeadLetter) bool) ([]Receipt, error) {
	return withClient(ctx, a, func(c *Client) ([]Receipt, error) {
		ds, err := c.DeadLetters(ctx, DeadFilter{})
		if err != nil {
			return nil, err
		}
		return c.replayLatest(ctx, ds, keep)
	})
}

// PurgeWhere deletes the dead letters keep selects and returns how many,
// as PurgeDead does.
func (a *Admin) PurgeWhere(ctx context.Context, keep func(DeadLetter) bool) (int, error) {
	ds, err := a.DeadLetters(ctx, DeadFilter{})
	if err != nil {
		return 0, err
	}
	return a.purgeLetters(ctx, ds, keep)
}

// purgeLetters deletes the letters of ds that keep selects and returns how
// many, stopping at the first failure.
func (a *Admin) purgeLetters(ctx context.Context, ds []DeadLetter, keep func(DeadLetter) bool) (int, error) {
	return withClient(ctx, a, func(c *Client) (int, error) {
		n := 0
		for _, d := range ds {
			if !keep(d) {
				continue
			}
			// Erased, not only deleted: a dead letter holds the task's page URL.
			if err := c.w.Erase(ctx, d.Seq); err != nil {
				return n, fmt.Errorf("purge dead letter %d (%s): %w", d.Seq, d.ID, err)
			}
			n++
		}
		return n, nil
	})
}

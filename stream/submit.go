package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nuid"

	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/internal/tracing"
	"github.com/captchaq/captchaq/stream/wire"
)

// Prepare validates a task and fills in what Submit would: the id and the
// deadline. It publishes nothing. SubmitAll uses it to check a whole batch
// before publishing any of it.
func (c *Client) Prepare(t Task) (Task, error) {
	now := c.cfg.Now()
	if err := t.Validate(now); err != nil {
		return t, err
	}
	if t.ID == "" {
		t.ID = nuid.Next()
	}
	// A duration from submission becomes an instant on the broker's clock,
	// as the default deadline is: the stored task names instants. The
	// broker's clock is read as the time passed since the client bound
	// (brokerNow), so a step of the client's clock since moves none of
	// them.
	bnow := c.brokerNow()
	if t.UseAt.In != 0 {
		t.UseAt = wire.At(bnow.Add(t.UseAt.In))
	}
	if t.NotBefore.In != 0 {
		t.NotBefore = wire.At(bnow.Add(t.NotBefore.In))
	}
	if t.Deadline.IsZero() {
		// On the broker's clock, which workers judge deadlines on: a
		// producer whose clock is off does not shorten or stretch it. A
		// deadline the caller gives is an instant of its own clock. The
		// default window counts from when the task may start.
		t.Deadline = wire.Latest(bnow, t.UseAt.At, t.NotBefore.At).Add(c.cfg.DefaultDeadline)
		now = bnow
	}
	for _, f := range []struct {
		name string
		at   time.Time
	}{{"use_at", t.UseAt.At}, {"not_before", t.NotBefore.At}} {
		if f.at.Sub(now) > c.top.Retention {
			return t, &TaskError{ID: t.ID, Err: fmt.Errorf("%s %s: further away than the stream's retention %s",
				f.name, f.at.Format(time.RFC3339), c.top.Retention)}
		}
	}
	if t.Deadline.Sub(now) > c.top.Retention {
		return t, &TaskError{ID: t.ID, Err: fmt.Errorf("deadline %s: further away than the stream's retention %s",
			t.Deadline.Format(time.RFC3339), c.top.Retention)}
	}
	if t.Priority == "" {
		t.Priority = wire.PriorityNormal
	}
	return t, nil
}

// Submit validates a task and enqueues it. The task id is the message id, so
// a Submit retried after a timeout never enqueues the task twice. The first
// submission under an id stands: a task whose id the stream already has
// (Receipt.Duplicate) with another use_at or not_before is not enqueued, and
// Submit returns its receipt with ErrIDTaken naming the field.
//
// Under a context with a deadline, the task must be stored a second before
// it (its submit-by instant): a Submit that returns an error has left
// nothing that will be paid, since a worker ends a task the broker stored
// after that instant without an attempt (code SUBMIT_BY_PASSED). When the
// broker gave no answer in time, the error is a *NotConfirmedError
// (ErrNotConfirmed): the broker may still have stored it in time, and
// Wait(id) says what became of it.
func (c *Client) Submit(ctx context.Context, t Task) (Receipt, error) {
	given := t
	t, err := c.Prepare(t)
	if err != nil {
		return Receipt{}, err
	}
	return c.publish(ctx, given, t)
}

// SubmitAll validates every task first and publishes none if any is invalid;
// the error then names each invalid task by its 1-based position. Otherwise
// it enqueues them in order and returns their receipts. A task whose id the
// stream already has with another use_at or not_before is reported as
// Submit reports it, in the error returned with every receipt.
func (c *Client) SubmitAll(ctx context.Context, tasks []Task) ([]Receipt, error) {
	prepared := make([]Task, len(tasks))
	var errs []error
	for i, t := range tasks {
		p, err := c.Prepare(t)
		if err != nil {
			var te *TaskError
			if errors.As(err, &te) {
				te.Line = i + 1
			}
			errs = append(errs, err)
			continue
		}
		prepared[i] = p
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	msgs := make([]*nats.Msg, len(prepared))
	var size int64
	var sb submitByStamp // every task's, from ctx's deadline
	for i, t := range prepared {
		m, err := c.taskMsg(t)
		if err != nil {
			return nil, err
		}
		injectTrace(ctx, m)
		sb = c.stampSubmitBy(ctx, m)
		msgs[i] = m
		size += c.storedBytes(t, m)
	}
	if err := c.checkRoom(ctx, len(msgs), size); err != nil {
		return nil, err
	}
	return c.publishAll(ctx, tasks, prepared, msgs, sb)
}

// submitWindow is how many task publishes SubmitAll keeps in flight at once.
const submitWindow = 256

// publishAll publishes the task messages pipelined, submitWindow at a time,
// and returns the receipts in order. A publish whose acknowledgement does not
// come is retried synchronously with the same message id, so nothing is lost
// and nothing doubled. On an error it returns the receipts of the tasks
// before the failed one: those are enqueued. sb is the tasks' submit-by
// instant, as publish checks it.
func (c *Client) publishAll(ctx context.Context, given, tasks []Task, msgs []*nats.Msg, sb submitByStamp) ([]Receipt, error) {
	out := make([]Receipt, 0, len(tasks))
	var taken []error // duplicates with another schedule
	type pending struct {
		i   int
		ack taskstore.Pending // without an answer: publish synchronously
	}
	var window []pending
	flush := func() error {
		for _, p := range window {
			ack, ok, err := p.ack.Wait(ctx)
			if err != nil {
				return fmt.Errorf("submit task %s: %w", tasks[p.i].ID, err)
			}
			if !ok {
				if ack, err = c.publishMsg(ctx, tasks[p.i], msgs[p.i]); err != nil {
					return sb.publishFailed(tasks[p.i].ID, err)
				}
			}
			if err := c.confirmedInTime(ctx, sb, tasks[p.i].ID, ack.Seq, msgs[p.i]); err != nil {
				return err
			}
			r := Receipt{ID: tasks[p.i].ID, Seq: ack.Seq, Duplicate: ack.Duplicate}
			if !r.Duplicate {
				c.own.put(r.ID, r.Seq)
			}
			if r.Duplicate {
				if err := c.sameSchedule(ctx, given[p.i], msgs[p.i], r); err != nil {
					taken = append(taken, err)
				}
			}
			out = append(out, r)
		}
		window = window[:0]
		return nil
	}
	for i, t := range tasks {
		window = append(window, pending{i: i, ack: c.w.SubmitAsync(msgs[i], t.ID)})
		if len(window) == submitWindow {
			if err := flush(); err != nil {
				return out, err
			}
		}
	}
	if err := flush(); err != nil {
		return out, err
	}
	return out, errors.Join(taken...)
}

func (c *Client) publish(ctx context.Context, given, t Task) (Receipt, error) {
	msg, err := c.taskMsg(t)
	if err != nil {
		return Receipt{}, err
	}
	injectTrace(ctx, msg)
	sb := c.stampSubmitBy(ctx, msg)
	if err := c.checkRoom(ctx, 1, c.storedBytes(t, msg)); err != nil {
		return Receipt{}, err
	}
	ack, err := c.publishMsg(ctx, t, msg)
	if err != nil {
		return Receipt{}, sb.publishFailed(t.ID, err)
	}
	if err := c.confirmedInTime(ctx, sb, t.ID, ack.Seq, msg); err != nil {
		return Receipt{}, err
	}
	r := Receipt{ID: t.ID, Seq: ack.Seq, Duplicate: ack.Duplicate}
	if r.Duplicate {
		return r, c.sameSchedule(ctx, given, msg, r)
	}
	c.own.put(r.ID, r.Seq)
	return r, nil
}

// taskMsg builds the message of a prepared task.
func (c *Client) taskMsg(t Task) (*nats.Msg, error) {
	b, err := json.Marshal(t)
	if err != nil {
		return nil, fmt.Errorf("encode task %s: %w", t.ID, err)
	}
	// Less a margin for the message's own headers (id, client, cancel hash).
	if most := wire.WholeDeadLetterMax(c.nc.MaxPayload()) - 1024; most > 0 && int64(len(b)) > most {
		return nil, &TaskError{ID: t.ID, Err: fmt.Errorf("task is %d bytes, the server takes at most %d", len(b), most)}
	}
	msg := nats.NewMsg(wire.TaskSubject(LaneOf(t.Method, t.Params), t.Queue(), t.ID))
	msg.Data = b
	msg.Header.Set(wire.HeaderTaskID, t.ID)
	if c.cfg.Name != "" {
		msg.Header.Set(wire.HeaderClient, c.cfg.Name)
	}
	if h, ok := c.cancelHashes.Load(t.ID); ok {
		msg.Header.Set(wire.HeaderCancelHash, h.(string))
	}
	return msg, nil
}

// publishMsg publishes one task message, retrying with its message id.
// storedBytes is what the stream's store keeps of task t's message msg
// once published (room.MessageBytes), with the headers its publish adds:
// its id and the stream it expects.
func (c *Client) storedBytes(t Task, msg *nats.Msg) int64 {
	n := room.MessageBytes(msg)
	for k, v := range map[string]string{nats.MsgIdHdr: t.ID, nats.ExpectedStreamHdr: c.top.Stream} {
		if msg.Header.Get(k) == "" {
			n += int64(len(k) + len(": ") + len(v) + len("\r\n"))
		}
	}
	return n
}

func (c *Client) publishMsg(ctx context.Context, t Task, msg *nats.Msg) (taskstore.Ack, error) {
	var ack taskstore.Ack
	err := c.whileStoreTakes(ctx, func(ctx context.Context) (err error) {
		ack, err = c.w.Submit(ctx, msg, t.ID)
		return err
	})
	if err != nil {
		return taskstore.Ack{}, fmt.Errorf("submit task %s: %w", t.ID, c.fullError(ctx, err))
	}
	return ack, nil
}

// injectTrace puts the span context of ctx, if any, into a task message's
// headers (OpenTelemetry's, W3C form), for the worker's attempt span to
// continue the producer's.
func injectTrace(ctx context.Context, msg *nats.Msg) {
	tracing.Inject(ctx, msg.Header)
}

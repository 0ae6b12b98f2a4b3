package stream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// Cancel asks that task id's latest submission not be solved. A worker that
// delivers it next (queued, handed back, or due after a retry delay; at
// once for a task waiting for its time) ends it as dead with reason
// canceled, without calling the service. An attempt
// already at the service is not stopped: its answer is stored as usual
// (and paid for). Cancel returns where the task stood when the record was
// stored; ErrTaskEnded if it had ended.
//
// A task this Client submitted with Solve is canceled as its owner; any
// other needs an admin's credentials (nats.conf refuses anyone else).
func (c *Client) Cancel(ctx context.Context, id, reason string) (TaskInfo, error) {
	ti, err := c.TaskOf(ctx, id)
	if err != nil {
		return ti, err
	}
	if ti.Status == TaskDone {
		return ti, fmt.Errorf("cancel task %s: %w", id, ErrTaskEnded)
	}
	rec := wire.CancelRecord{ID: id, Gen: ti.Gen, At: c.cfg.Now(), By: c.cfg.Name, Reason: text.Cut(reason, 100)}
	subject := wire.CancelRecordSubject(id)
	if secret, ok := c.cancelKeys.Load(id); ok {
		rec.Secret, subject = secret.(string), wire.CancelSubject(id, ti.Gen)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return ti, err
	}
	if err := c.w.PublishData(ctx, subject, b); err != nil {
		return ti, fmt.Errorf("cancel task %s: %w", id, err)
	}
	ti.Canceled = true
	c.nudge(ctx, id, ti.Gen)
	return ti, nil
}

// nudge has generation gen of task id, if it waits in the waiting room,
// looked at now rather than at its next delivery (up to the workers'
// ScheduleCheck later): it publishes a copy of its message there, which a
// worker is handed at once and, finding the cancel, ends; the message
// itself then finds the generation ended. A copy is the generation's only
// if a worker recorded its digest, so a producer's copy of another's task
// changes nothing but when a worker looks at it, and one that is not the
// task's (taskstore.Reader.LastTaskMessage) is not the one copied. Best effort: without it,
// the cancel takes effect at the next delivery.
func (c *Client) nudge(ctx context.Context, id string, gen uint64) {
	m, ok, err := c.rd.LastTaskMessage(ctx, wire.SubjectLater+".*.*."+id, id)
	if err != nil || !ok {
		return
	}
	g, submitted := wire.TaskMessageGen(m.Header, m.Seq, m.Stored)
	if g != gen {
		return
	}
	msg := taskstore.MovedCopy(m.Subject, m.Header, m.Data, gen, submitted, m.Seq)
	msg.Header.Set(wire.HeaderMsgID, wire.MovedMsgID(id, m.Seq)+".cancel")
	_ = c.w.Publish(ctx, msg)
}

// cancelRequested reports whether a valid cancel record names generation
// gen of task id, whose state is st and whose task message carries header h.
func (c *Client) cancelRequested(ctx context.Context, id string, st taskstore.GenState, h nats.Header) (bool, error) {
	rec, err := c.rd.CancelOf(ctx, id, st, h)
	return rec != nil, err
}

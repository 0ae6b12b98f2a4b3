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
// delivers it next (queued, handed back, or due after a retry delay) ends it
// as dead with reason canceled, without calling the service. An attempt
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
	if _, err := c.js.Publish(ctx, subject, b); err != nil {
		return ti, fmt.Errorf("cancel task %s: %w", id, err)
	}
	ti.Canceled = true
	return ti, nil
}

// cancelRequested reports whether a valid cancel record names generation
// gen of task id, whose state is st and whose task message carries header h.
func (c *Client) cancelRequested(ctx context.Context, id string, st taskstore.GenState, h nats.Header) (bool, error) {
	rec, err := taskstore.CancelOf(ctx, c.nc, c.top.Domain, c.top.Stream, id, st, h)
	return rec != nil, err
}

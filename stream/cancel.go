package stream

import (
	"context"
	"encoding/json"
	"fmt"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
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
	rec := CancelRecord{ID: id, Gen: ti.Gen, At: c.cfg.Now(), By: c.cfg.Name, Reason: text.Cut(reason, 100)}
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
func (c *Client) cancelRequested(ctx context.Context, id string, st genState, h nats.Header) (bool, error) {
	rec, err := cancelOf(ctx, c.nc, c.top, id, st, h)
	return rec != nil, err
}

// ownerCancelScan is how many records of an owner's cancel subject a
// reader looks at, oldest first: one batched read, whatever is published.
const ownerCancelScan = 16

// cancelOf returns the valid cancel record of the generation of task id
// whose state is st, nil when there is none: an admin's (or an owner's
// that a worker relayed), which st holds, at no cost; else, for a task
// message that names a cancel hash (header h), an owner's whose secret
// matches it, among the first ownerCancelScan records on the owner's
// subject (they all come after the task message): one batched direct get.
// A task without a cancel hash costs nothing.
//
// Any producer may publish on an owner's subject. A forged record after
// the owner's does not hide it; forged records before it, more than
// ownerCancelScan of them, do here, and workers that run when the owner's
// record is stored relay it to the task's records anyway (relayCancels).
func cancelOf(ctx context.Context, nc *nats.Conn, top Topology, id string, st genState, h nats.Header) (*CancelRecord, error) {
	if st.cancel != nil {
		return st.cancel, nil
	}
	if h.Get(wire.HeaderCancelHash) == "" {
		return nil, nil // only an owner's task can have an owner's cancel
	}
	r, err := jscall.NewDirectReader(nc, top.Domain, top.Stream)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	msgs, _, err := r.BatchOf(ctx, wire.CancelSubject(id, st.gen), st.gen, ownerCancelScan)
	if err != nil {
		return nil, fmt.Errorf("read cancel records of task %s: %w", id, err)
	}
	for _, m := range msgs {
		if rec := wire.ParseCancel(m.Data(), st.gen); rec != nil && wire.OwnsCancel(h, rec.Secret) {
			return rec, nil
		}
	}
	return nil, nil
}

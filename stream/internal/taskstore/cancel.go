package taskstore

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// OwnerCancelScan is how many records of an owner's cancel subject a
// reader looks at, oldest first: one batched read, whatever is published.
const OwnerCancelScan = 16

// CancelOf returns the valid cancel record of the generation of task id
// whose state is st, nil when there is none: an admin's (or an owner's
// that a worker relayed), which st holds, at no cost; else, for a task
// message that names a cancel hash (header h), an owner's whose secret
// matches it, among the first OwnerCancelScan records on the owner's
// subject (they all come after the task message): one batched direct get.
// A task without a cancel hash costs nothing.
//
// Any producer may publish on an owner's subject. A forged record after
// the owner's does not hide it; forged records before it, more than
// OwnerCancelScan of them, do here, and workers that run when the owner's
// record is stored relay it to the task's records anyway.
func CancelOf(ctx context.Context, nc *nats.Conn, domain, stream string, id string, st GenState, h nats.Header) (*wire.CancelRecord, error) {
	if st.Cancel != nil {
		return st.Cancel, nil
	}
	if h.Get(wire.HeaderCancelHash) == "" {
		return nil, nil // only an owner's task can have an owner's cancel
	}
	r, err := jscall.NewDirectReader(nc, domain, stream)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	msgs, _, err := r.BatchOf(ctx, wire.CancelSubject(id, st.Gen), st.Gen, OwnerCancelScan)
	if err != nil {
		return nil, fmt.Errorf("read cancel records of task %s: %w", id, err)
	}
	for _, m := range msgs {
		if rec := wire.ParseCancel(m.Data(), st.Gen); rec != nil && wire.OwnsCancel(h, rec.Secret) {
			return rec, nil
		}
	}
	return nil, nil
}

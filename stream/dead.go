package stream

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream/wire"
)

// DeadFilter selects dead letters; its zero value selects all. Set fields
// combine with AND.
type DeadFilter struct {
	// Method keeps letters of tasks of this method; empty means any.
	Method string
	// Reason keeps letters dead for this reason; empty means any. It must be
	// one of retry.Reasons.
	Reason retry.Reason
	// Since keeps letters that died at or after it.
	Since time.Time
	// Pending keeps only letters not yet replayed.
	Pending bool
	// IDs keeps the letters of these task ids; empty means any.
	IDs []string
}

func (f DeadFilter) match(d DeadLetter) bool {
	return (len(f.IDs) == 0 || slices.Contains(f.IDs, d.ID)) &&
		(f.Method == "" || f.Method == d.Method) &&
		(f.Reason == "" || f.Reason == d.Reason) &&
		(f.Since.IsZero() || !d.DeadAt.Before(f.Since)) &&
		(!f.Pending || d.Replayed == nil)
}

// DeadLetters lists the dead letters that match f, oldest first.
func (c *Client) DeadLetters(ctx context.Context, f DeadFilter) ([]DeadLetter, error) {
	return c.deadLetters(ctx, wire.SubjectDead+".>", wire.SubjectReplays+".>", f)
}

func (c *Client) deadLetters(ctx context.Context, deadSubj, replaySubj string, f DeadFilter) ([]DeadLetter, error) {
	if f.Reason != "" && !f.Reason.Valid() {
		return nil, fmt.Errorf("reason %q: want one of %v", f.Reason, retry.Reasons)
	}
	letters, err := c.rd.DeadLetters(ctx, deadSubj, replaySubj)
	if err != nil {
		return nil, fmt.Errorf("list dead letters: %w", err)
	}
	out := letters[:0]
	for _, d := range letters {
		if f.match(d) {
			out = append(out, d)
		}
	}
	return out, nil
}

// DeadLetterOf returns the latest dead letter of task id, with its replay
// status.
func (c *Client) DeadLetterOf(ctx context.Context, id string) (DeadLetter, error) {
	if err := ValidateID(id); err != nil {
		return DeadLetter{}, err
	}
	ds, err := c.deadLetters(ctx, wire.DeadSubject(id), wire.ReplaySubject(id), DeadFilter{})
	if err != nil {
		return DeadLetter{}, err
	}
	if len(ds) == 0 {
		return DeadLetter{}, fmt.Errorf("dead letter of task %s: %w", id, ErrNotFound)
	}
	return ds[len(ds)-1], nil
}

package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go/jetstream"
)

// RecentOutcomes returns the outcomes stored since since, newest first, at
// most limit of them (0: all), without their tokens (Wait and Results
// have those).
func (c *Client) RecentOutcomes(ctx context.Context, since time.Time, limit int) ([]Outcome, error) {
	var out []Outcome
	err := scan(ctx, c, scanOpts{subjects: []string{wire.SubjectResults + ".>"}, startTime: since}, func(m jetstream.Msg) (bool, error) {
		var o Outcome
		if json.Unmarshal(m.Data(), &o) == nil && o.ID != "" {
			out = append(out, o)
		}
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("recent outcomes: %w", err)
	}
	for i, j := 0, len(out)-1; i < j; i, j = i+1, j-1 {
		out[i], out[j] = out[j], out[i]
	}
	if limit > 0 && len(out) > limit {
		out = out[:limit]
	}
	return out, nil
}

// OutcomesSince calls fn with every outcome stored since since (zero: all
// the stream keeps), oldest first, each with its token while the token
// stream holds it; with follow it then waits for new ones until ctx ends.
func (c *Client) OutcomesSince(ctx context.Context, since time.Time, follow bool, fn func(Outcome)) error {
	return scan(ctx, c, scanOpts{subjects: []string{wire.SubjectResults + ".>"}, startTime: since, follow: follow}, func(m jetstream.Msg) (bool, error) {
		var o Outcome
		if json.Unmarshal(m.Data(), &o) != nil || o.ID == "" {
			return false, nil
		}
		o, _, err := c.withToken(ctx, o, genOf(m.Headers()))
		if err != nil {
			return false, err
		}
		fn(o)
		return false, nil
	})
}

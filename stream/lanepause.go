package stream

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
)

// PauseLane stops workers from taking the lane's tasks (both priorities)
// until until, or until ResumeLane: the lane's consumers are paused
// (nats-server 2.11 or newer). Tasks already taken finish as usual; new ones
// queue. It needs the admin's permissions ($JS.API.CONSUMER.PAUSE).
func (c *Client) PauseLane(ctx context.Context, lane Lane, until time.Time) error {
	if !slices.Contains(Lanes, lane) {
		return fmt.Errorf("lane %q: want one of %v", lane, Lanes)
	}
	for _, p := range wire.Priorities {
		name := consumerName(lane, p)
		if _, err := c.s.PauseConsumer(ctx, name, until); err != nil {
			return fmt.Errorf("pause %s: %w", name, err)
		}
	}
	return nil
}

// ResumeLane lets workers take the lane's tasks again.
func (c *Client) ResumeLane(ctx context.Context, lane Lane) error {
	if !slices.Contains(Lanes, lane) {
		return fmt.Errorf("lane %q: want one of %v", lane, Lanes)
	}
	for _, p := range wire.Priorities {
		name := consumerName(lane, p)
		if _, err := c.s.ResumeConsumer(ctx, name); err != nil {
			return fmt.Errorf("resume %s: %w", name, err)
		}
	}
	return nil
}

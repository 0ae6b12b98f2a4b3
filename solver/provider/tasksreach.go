package provider

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// Whether a tasks provider answers: a failed call puts it out until a free
// probe (getBalance) is answered, and what is said meanwhile.

// ready says whether a createTask may be sent: the service answered its
// last call, or answers a probe (getBalance) due now. Else the task is
// not sent (an outage's capacity wait, surely unpaid, which a Set takes
// to the next provider): a service that answers nothing (its calls time
// out) or only pages is asked no createTask that may be paid and never
// answered.
func (c *TasksClient) ready(ctx context.Context) error {
	since, why := c.Unreachable()
	if since.IsZero() {
		return nil
	}
	c.mu.Lock()
	due := !c.probing && !c.cfg.Now().Before(c.probeAt)
	c.probing = c.probing || due
	c.mu.Unlock()
	if due {
		var r createtask.BalanceResponse
		err := c.call(ctx, createtask.PathGetBalance, createtask.Envelope{ClientKey: c.cfg.APIKey}, &r)
		c.mu.Lock()
		c.probing = false
		if err != nil {
			c.probeGap = min(max(2*c.probeGap, probeFirstGap), probeMaxGap)
			c.probeAt = c.cfg.Now().Add(c.probeGap)
		}
		c.mu.Unlock()
		if err == nil {
			return nil
		}
		since, why = c.Unreachable()
	}
	return &solver.Error{Code: solver.CodeUnreachable, Class: retry.Capacity, Op: createtask.PathCreateTask,
		Err: fmt.Errorf("not submitted: the provider gives no word since %s (%v)", since.UTC().Format(time.RFC3339), why)}
}

// failed notes a call that did not reach the service or got a 5xx.
func (c *TasksClient) failed(what string) {
	what = c.scrub(what)
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		c.since = c.cfg.Now()
	}
	c.last = what
}

// answered notes a reply.
func (c *TasksClient) answered() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.since, c.last = time.Time{}, ""
	c.probeAt, c.probeGap = time.Time{}, 0
}

// Unreachable reports since when every call failed, and the last failure.
func (c *TasksClient) Unreachable() (time.Time, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.since.IsZero() {
		return time.Time{}, nil
	}
	return c.since, errors.New(c.last)
}

package stream

import (
	"context"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// PlanOption is an optional setting of Admin.SetPlan.
type PlanOption func(*planOptions)

type planOptions struct {
	early bool
	held  *int
}

// PlanEarly makes workers give a plan thread back when the captcha holding it
// is probably solved at the service (solver.WithProbablyReady), not when its
// answer is fetched, so the next captcha is submitted about when the service
// frees the thread. The service then may, for a moment, be sent more
// captchas than the plan's threads: a wrong guess is refused there with a
// capacity code (no attempt spent), and the solver guesses later after
// each refusal. Without it captchaq never has more captchas at the
// service than the quota.
func PlanEarly() PlanOption { return func(o *planOptions) { o.early = true } }

// PlanHeld makes SetPlan store in n the quota it left held: the threads
// it was asked for, or another operator's quota set at the same moment
// and recorded after this one, which then holds in their place (0: none).
// SetPlan returns nil in both cases: the two calls ran at once, and the
// later one holds as it would had it come after.
func PlanHeld(n *int) PlanOption { return func(o *planOptions) { o.held = n } }

// setPlan is Admin.SetPlan of topology t on nc.
func setPlan(ctx context.Context, nc *nats.Conn, t Topology, threads int, opts ...PlanOption) error {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return err
	}
	var o planOptions
	for _, opt := range opts {
		opt(&o)
	}
	if threads < 0 {
		return fmt.Errorf("plan threads %d: want 0 or more", threads)
	}
	held, err := topology.ApplyOperatorPlan(ctx, js, t.spec(), topology.OperatorPlan{Threads: threads, Early: o.early})
	if err != nil {
		return err
	}
	if o.held != nil {
		*o.held = held.Threads
	}
	return nil
}

// PlanThreads returns the plan-wide thread quota of t, 0 when none is set
// (Admin.SetPlan sets it). Every role may read it.
func PlanThreads(ctx context.Context, nc *nats.Conn, t Topology) (int, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return 0, err
	}
	n, _, err := dispatcher.PlanSettings(ctx, js)
	return n, err
}

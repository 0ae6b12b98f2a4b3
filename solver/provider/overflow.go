// Past the plan: a task that finds every primary's plan full waits for a
// thread (a capacity wait, no attempt spent, nothing paid), unless
// waiting would miss its deadline; then the cheapest overflow provider
// that solves its method takes it, and is paid.

package provider

import (
	"context"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// OverflowPolicy says when a task goes past the plan to an overflow provider.
type OverflowPolicy string

// The overflow policies.
const (
	// OverflowAtDeadline overflows a task only when waiting for a plan
	// thread would miss its deadline (WaitForPlan), so the overflow is
	// paid for the tasks that need it and no others.
	OverflowAtDeadline OverflowPolicy = ""
	// OverflowAlways overflows every task that finds the plans full.
	OverflowAlways OverflowPolicy = "always"
	// OverflowNever never overflows: tasks wait for a plan thread.
	OverflowNever OverflowPolicy = "never"
)

// OverflowQuantile is the quantile of a kind's solve time on the plan that
// WaitForPlan counts with: a task overflows unless even a slow solve after
// a slow thread would be in time.
const OverflowQuantile = 0.9

// WaitForPlan is how long a task of kind that finds plan's threads full
// may take to be solved there if it waits: a thread frees within one
// solve of the captchas holding them, and the task's own solve takes
// another; twice the kind's solve time at OverflowQuantile as the plan's
// client learned it (solver.Client.SolveTime: before it learned the kind,
// four times its first poll).
func WaitForPlan(plan Client, kind string) time.Duration {
	d, _ := plan.SolveTime(kind, OverflowQuantile)
	return 2 * d
}

// overflow decides about req, refused by plan's full plan: the cheapest
// overflow provider solves it when the policy says so and one is in
// (took); else the task is not taken, and waits for the plan. An
// overflow provider that is out sends the task back to wait.
func (s *Set) overflow(ctx context.Context, req solver.Request, plan *member) (ans solver.Answer, err error, took bool) {
	o := s.cheapest(req.Method)
	if o == nil || !s.overflows(ctx, req, plan) {
		return solver.Answer{}, nil, false
	}
	r, err := s.reserve(ctx, o, req)
	if err != nil {
		// Past its budget the overflow is not paid: the task waits for
		// the plan, which costs nothing more.
		return solver.Answer{}, nil, false
	}
	ans, err, accepted := s.solveOn(ctx, o, req, r)
	if err != nil && !accepted && ctx.Err() == nil && movesOn(err) {
		if solver.ClassOf(err) == retry.Fatal {
			o.refuse(s.now().Add(s.outFor), solver.CodeOf(err))
		}
		return solver.Answer{}, nil, false
	}
	return ans, err, true
}

// overflows reports whether req goes past plan now, by the policy.
func (s *Set) overflows(ctx context.Context, req solver.Request, plan *member) bool {
	switch s.overflowWhen {
	case OverflowAlways:
		return true
	case OverflowNever:
		return false
	}
	return s.missesDeadline(ctx, req, plan)
}

// missesDeadline reports whether req would miss its deadline waiting for
// a free thread or worker of plan (WaitForPlan).
func (s *Set) missesDeadline(ctx context.Context, req solver.Request, plan *member) bool {
	deadline, ok := ctx.Deadline()
	return ok && deadline.Sub(s.now()) < WaitForPlan(plan.Client, solver.Kind(req.Method, req.Params))
}

// noWorkers decides about req when a per-solve primary has no free
// workers (full) and no overflow provider took the task: a task that
// would miss its deadline waiting for them goes to the fallbacks, in
// route's order, as when the primary is out; any other waits (full).
func (s *Set) noWorkers(ctx context.Context, req solver.Request, route []*member, busy *member, full error) (solver.Answer, error) {
	if busy.Entry.Billing.Plan() || !s.missesDeadline(ctx, req, busy) {
		return solver.Answer{}, full
	}
	for _, m := range route {
		if m.Entry.Role != Fallback {
			continue
		}
		if _, out := m.refused(s.now()); out {
			continue
		}
		r, err := s.reserve(ctx, m, req)
		if err != nil {
			continue
		}
		ans, err, accepted := s.solveOn(ctx, m, req, r)
		if err == nil || accepted || ctx.Err() != nil || !movesOn(err) {
			return ans, err
		}
		if solver.ClassOf(err) == retry.Fatal {
			m.refuse(s.now().Add(s.outFor), solver.CodeOf(err))
		}
	}
	return solver.Answer{}, full
}

// cheapest is the overflow provider that solves method at the lowest
// price and is not passed over; nil when none is.
func (s *Set) cheapest(method string) *member {
	var best *member
	now := s.now()
	for _, m := range s.members {
		if m.Entry.Role != Overflow || !m.solves(method) {
			continue
		}
		if _, out := m.refused(now); out {
			continue
		}
		if best == nil || m.Entry.Billing.Price(method) < best.Entry.Billing.Price(method) {
			best = m
		}
	}
	return best
}

// planFull reports whether err is m's refusal of a submission for want of
// a plan thread: ERROR_NO_SLOT_AVAILABLE, or ERROR_ZERO_BALANCE where the
// service means that by it (CaptchaAI; on 2captcha it means no money).
func (m *member) planFull(err error) bool {
	code := solver.CodeOf(err)
	svc, _ := m.Entry.service()
	return code == classic.CodeNoSlotAvailable || code == classic.CodeZeroBalance && svc.Classify(code) == retry.Capacity
}

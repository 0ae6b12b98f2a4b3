// Budgets: a cap per provider (Entry.BudgetPerDay) and per producer
// (File.ProducerBudgetsPerDay) on what is paid a day (UTC), checked
// against the pool's spend of the day (Ledger) before a new captcha is
// sent to a provider that charges for it.

package provider

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// CodeBudgetExceeded is the code of a task that no provider may take
// without passing a budget: permanent, so it ends dead before anything is
// paid for it.
const CodeBudgetExceeded = wire.CodeBudgetExceeded

// CodeBudgetUnread is the code of a task whose budget could not be
// checked (the ledger did not answer): a capacity wait, no attempt spent,
// nothing paid; the task is tried again.
const CodeBudgetUnread = "BUDGET_UNREAD"

// overBudget says why m may not take a new captcha of req: the price of
// one would take the day's spend of m, or of req's producer, past its
// cap. Nil when it may: a solve that costs nothing (a thread plan, a
// price of 0) is never over a budget, and without a Ledger none is kept.
func (s *Set) overBudget(ctx context.Context, m *member, req solver.Request) error {
	price := m.Entry.Billing.Price(req.Method)
	l := s.ledger.Load()
	if price <= 0 || l == nil {
		return nil
	}
	day := s.now()
	check := func(scope, what string, budget float64) error {
		if budget <= 0 {
			return nil
		}
		spent, err := (*l).Spent(ctx, scope, day)
		if err != nil {
			return &solver.Error{Code: CodeBudgetUnread, Class: retry.Capacity, Op: "budget",
				Err: fmt.Errorf("provider %s: %s's spend of the day could not be read: %w", m.Entry.Name, what, err)}
		}
		if micros(spent)+micros(price) > micros(budget) {
			return &solver.Error{Code: CodeBudgetExceeded, Class: retry.Permanent, Op: "budget",
				Err: fmt.Errorf("provider %s: a solve at %g would take %s's spend of the day (UTC), %.6g, past its budget of %.6g",
					m.Entry.Name, price, what, spent, budget)}
		}
		return nil
	}
	if err := check(ProviderScope(m.Entry.Name), "provider "+m.Entry.Name, m.Entry.BudgetPerDay); err != nil {
		return err
	}
	budget, ok := s.producerCaps[req.Producer]
	if !ok {
		budget = s.producerCaps["*"]
	}
	return check(ProducerScope(req.Producer), fmt.Sprintf("producer %q", req.Producer), budget)
}

// micros is an amount in millionths: budgets compare to a millionth, as
// the spend in stats is rounded.
func micros(v float64) int64 { return int64(v*1e6 + 0.5) }

// paid adds a solve's cost to the day's spend of its provider and its
// producer, when the Set keeps a Ledger. A ledger that cannot be written
// leaves the day's spend short of this solve: a warning says so.
func (s *Set) paid(ctx context.Context, provider, producer string, cost float64) {
	l := s.ledger.Load()
	if l == nil || cost <= 0 {
		return
	}
	day := s.now()
	for _, scope := range []string{ProviderScope(provider), ProducerScope(producer)} {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		err := (*l).Add(actx, scope, day, cost)
		cancel()
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "a solve's cost was not added to the day's spend: budgets count it short",
				slog.String("provider", provider), slog.Float64("cost", cost), slog.Any("error", err))
		}
	}
}

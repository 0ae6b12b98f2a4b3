// Budgets: a cap per provider (Entry.BudgetPerDay) and per producer
// (File.ProducerBudgetsPerDay) on what is paid a day (UTC), kept in the
// pool's spend of the day (Ledger). A provider that charges per solve
// charges a captcha when it accepts it, answered or not (2captcha returns
// the price of an unsolvable one only), so the spend is counted then:
// the price of a new captcha is added to the day's spend before it is
// sent, only if that keeps it within the caps (Ledger.AddWithin: workers
// sending at once never pass a cap together), given back when the
// captcha surely was not accepted or was refunded (refundsUnsolvable),
// and corrected by the cost the provider reports with the answer.

package provider

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
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

// reservation is the price of one captcha, added to the day's spend of
// the scopes it names before the captcha is sent.
type reservation struct {
	day    time.Time
	price  float64
	scopes []string
}

// reserve adds the price of a new captcha of req on m to the day's spend
// of m and of req's producer, if that takes neither past its cap; else
// nothing is added and the error says which cap (CodeBudgetExceeded) or
// that the ledger did not answer (CodeBudgetUnread). Nil, nil when
// nothing is counted: a solve that costs nothing (a thread plan, a price
// of 0) is never over a budget, and without a Ledger none is kept.
func (s *Set) reserve(ctx context.Context, m *member, req solver.Request) (*reservation, error) {
	price := m.Entry.Billing.Price(req.Method)
	l := s.ledger.Load()
	if price <= 0 || l == nil {
		return nil, nil
	}
	r := &reservation{day: s.now(), price: price}
	add := func(scope, what string, budget float64) error {
		ok, spent, err := (*l).AddWithin(ctx, scope, r.day, price, budget)
		switch {
		case err != nil && budget <= 0:
			// No cap to keep: the captcha goes, counted short.
			s.log.LogAttrs(ctx, slog.LevelWarn, "a captcha's price was not added to the day's spend: budgets count it short",
				slog.String("scope", scope), slog.Float64("price", price), slog.Any("error", err))
			return nil
		case err != nil:
			return &solver.Error{Code: CodeBudgetUnread, Class: retry.Capacity, Op: "budget",
				Err: fmt.Errorf("provider %s: %s's spend of the day could not be read: %w", m.Entry.Name, what, err)}
		case !ok:
			return &solver.Error{Code: CodeBudgetExceeded, Class: retry.Permanent, Op: "budget",
				Err: fmt.Errorf("provider %s: a solve at %g would take %s's spend of the day (UTC), %.6g, past its budget of %.6g",
					m.Entry.Name, price, what, spent, budget)}
		}
		r.scopes = append(r.scopes, scope)
		return nil
	}
	budget, ok := s.producerCaps[req.Producer]
	if !ok {
		budget = s.producerCaps["*"]
	}
	if err := add(ProviderScope(m.Entry.Name), "provider "+m.Entry.Name, m.Entry.BudgetPerDay); err != nil {
		return nil, err
	}
	if err := add(ProducerScope(req.Producer), fmt.Sprintf("producer %q", req.Producer), budget); err != nil {
		s.giveBack(ctx, r)
		return nil, err
	}
	return r, nil
}

// giveBack takes r's price off the day's spend: its captcha was not
// accepted, or was refunded.
func (s *Set) giveBack(ctx context.Context, r *reservation) {
	if r != nil {
		s.addSpend(ctx, r.scopes, r.day, -r.price)
	}
}

// addSpend adds cost to the day's spend of scopes, when the Set keeps a
// Ledger. A ledger that cannot be written leaves the day's spend off by
// cost: a warning says so.
func (s *Set) addSpend(ctx context.Context, scopes []string, day time.Time, cost float64) {
	l := s.ledger.Load()
	if l == nil || cost == 0 {
		return
	}
	for _, scope := range scopes {
		actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimTimeout)
		err := (*l).Add(actx, scope, day, cost)
		cancel()
		if err != nil {
			s.log.LogAttrs(ctx, slog.LevelWarn, "the day's spend could not be corrected: budgets count it off",
				slog.String("scope", scope), slog.Float64("cost", cost), slog.Any("error", err))
		}
	}
}

// settle counts, once m's Solve of req ended (err), what m charged for
// it beyond r (nil: nothing reserved, as for a captcha resumed, whose
// price the attempt that sent it counted): fresh captchas accepted past
// the first at their price, a captcha refunded (ERROR_CAPTCHA_UNSOLVABLE)
// given back, a reported cost in place of the price; a submission surely
// not accepted gives r back.
func (s *Set) settle(ctx context.Context, m *member, req solver.Request, r *reservation, fresh int, accepted bool,
	ans solver.Answer, err error) {
	price := m.Entry.Billing.Price(req.Method)
	scopes, day := []string{ProviderScope(m.Entry.Name), ProducerScope(req.Producer)}, s.now()
	if r != nil {
		scopes, day = r.scopes, r.day
		fresh--
	}
	if price > 0 && fresh > 0 {
		s.addSpend(ctx, scopes, day, float64(fresh)*price)
	}
	switch {
	case err == nil:
		s.addSpend(ctx, scopes, day, ans.Cost-price)
	case !accepted && !solver.MayBePaid(err) && ctx.Err() == nil:
		s.giveBack(ctx, r)
	case accepted && solver.CodeOf(err) == classic.CodeCaptchaUnsolvable && price > 0 && m.Entry.refundsUnsolvable():
		s.addSpend(ctx, scopes, day, -price)
	}
}

// refundsUnsolvable reports whether the provider returns the price of a
// captcha it answers ERROR_CAPTCHA_UNSOLVABLE: 2captcha does ("The
// captcha price is automatically returned to your balance",
// 2captcha.com/api-docs/error-codes), in both its dialects (API v2 at
// api.2captcha.com, and RuCaptcha's), and a classic service is taken as
// one of its profiles (CaptchaAI's plan costs nothing a captcha).
// Anti-Captcha charges it ("Captcha could not be solved by 5 different
// workers": customers are charged, the workers being paid for their time,
// anti-captcha.com/apidoc/errors, identifier 12); any other tasks provider
// is counted as charging it, on the side of a cap refused a little early.
func (e Entry) refundsUnsolvable() bool {
	return e.Dialect != Tasks || onHost(e.BaseURL, "2captcha.com", "rucaptcha.com")
}

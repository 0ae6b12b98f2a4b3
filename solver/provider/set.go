package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// Cost bases of an Answer (solver.Answer.CostBasis).
const (
	// CostPrice is a per-solve provider's stated price of the method.
	CostPrice = "price"
	// CostPlan is a solve on a thread plan: paid by the month, whatever is
	// solved, so it costs nothing more (Cost 0).
	CostPlan = "plan"
)

// DefaultOutFor is Config.OutFor's default.
const DefaultOutFor = time.Minute

// Member is one provider of a Set: its entry of the providers file and the
// client of its service (a *solver.Client for the classic dialect, a
// *TasksClient for the tasks one).
type Member struct {
	Entry  Entry
	Client Client
}

// Config configures a Set. Members is required; every other zero field
// takes the default written beside it.
type Config struct {
	// Members are the providers, in the order tasks try them within a
	// role.
	Members []Member
	// OutFor is how long a provider that refused the key or had no funds
	// (a Fatal code) is passed over before it is tried again. Default
	// DefaultOutFor.
	OutFor time.Duration
	// Logger receives a line when a provider is passed over and when it
	// takes tasks again. Default: discard.
	Logger *slog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// Overflow says when a task goes to an overflow provider while every
	// primary's plan is full. Default OverflowAtDeadline.
	Overflow OverflowPolicy
	// Claims, when set, is the pool's record of which captcha ids its
	// workers poll (stream.Claims): a captcha id a provider gives this
	// Set that another worker polls is then refused as one another task
	// of the Set polls is (CodeReusedID). Without it the guard holds
	// within the Set only. Set it with Set.ShareClaims once the worker is
	// connected.
	Claims Claims
	// Ledger, when set, is the pool's spend of the day (stream.Ledger):
	// every paid solve is added to its provider's and its producer's, and
	// the budgets (Entry.BudgetPerDay, ProducerBudgetsPerDay) are checked
	// against it. Without it no budget is kept. Set it with
	// Set.ShareLedger once the worker is connected.
	Ledger Ledger
	// ProducerBudgetsPerDay is the providers file's cap per producer
	// (File.ProducerBudgetsPerDay).
	ProducerBudgetsPerDay map[string]float64
}

// Ledger is the pool's spend per day and scope (ProviderScope,
// ProducerScope): stream.Ledger.
type Ledger interface {
	Spent(ctx context.Context, scope string, day time.Time) (float64, error)
	// Add adds cost (less than 0: gives it back).
	Add(ctx context.Context, scope string, day time.Time, cost float64) error
	// AddWithin adds cost only if the day's spend stays within budget
	// (0: none), atomically: ok false, nothing added, when it would not;
	// spent is the spend it found.
	AddWithin(ctx context.Context, scope string, day time.Time, cost, budget float64) (ok bool, spent float64, err error)
}

// ProviderScope and ProducerScope name a provider's and a producer's
// spend in a Ledger.
func ProviderScope(name string) string { return "provider:" + name }

// ProducerScope: see ProviderScope.
func ProducerScope(name string) string { return "producer:" + name }

// Set solves through several providers (see the package documentation).
// It is safe for concurrent use.
type Set struct {
	members      []*member
	outFor       time.Duration
	overflowWhen OverflowPolicy
	log          *slog.Logger
	now          func() time.Time
	claims       atomic.Pointer[Claims]
	ledger       atomic.Pointer[Ledger]
	producerCaps map[string]float64
}

// member is a provider with what the Set knows of it.
type member struct {
	Member
	methods []string

	mu       sync.Mutex
	outUntil time.Time // refused (Fatal) until then
	outCode  string
	polling  map[string]bool // the captcha ids Solves of the Set poll here now

	// detached counts the Solves whose captcha waits here without a
	// worker thread (solver.Detach), at most Entry.maxInFlight.
	detached atomic.Int32
}

var _ solver.Solver = (*Set)(nil)

// New returns a Set of cfg.Members, or an error naming the first member
// out of range.
func New(cfg Config) (*Set, error) {
	if len(cfg.Members) == 0 {
		return nil, errors.New("provider: no members")
	}
	s := &Set{outFor: cfg.OutFor, log: cfg.Logger, now: cfg.Now, overflowWhen: cfg.Overflow}
	switch cfg.Overflow {
	case OverflowAtDeadline, OverflowAlways, OverflowNever:
	default:
		return nil, fmt.Errorf("provider: Overflow %q: want %q (at the deadline), %q or %q", cfg.Overflow, OverflowAtDeadline, OverflowAlways, OverflowNever)
	}
	if s.outFor < 0 {
		return nil, fmt.Errorf("provider: OutFor %s: want 0 (the default) or more", s.outFor)
	}
	if s.outFor == 0 {
		s.outFor = DefaultOutFor
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	f := File{}
	for i, m := range cfg.Members {
		f.Providers = append(f.Providers, m.Entry)
		if m.Client == nil {
			return nil, fmt.Errorf("provider: members[%d] (%s): no Client", i, m.Entry.Name)
		}
		svc, _ := m.Entry.service()
		s.members = append(s.members, &member{Member: m, methods: m.Entry.methods(svc)})
	}
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if cfg.Claims != nil {
		s.claims.Store(&cfg.Claims)
	}
	if cfg.Ledger != nil {
		s.ledger.Store(&cfg.Ledger)
	}
	if err := (File{Providers: f.Providers, ProducerBudgetsPerDay: cfg.ProducerBudgetsPerDay}).Validate(); err != nil {
		return nil, err
	}
	s.producerCaps = cfg.ProducerBudgetsPerDay
	return s, nil
}

// ShareLedger makes l the Set's record of the pool's spend (Config.Ledger).
func (s *Set) ShareLedger(l Ledger) { s.ledger.Store(&l) }

// Open returns a Set of the file's providers, each with a solver.Client
// of base (its pacing, timing, clock, logger) at the entry's BaseURL,
// key and service profile.
func Open(f File, base solver.Config, cfg Config) (*Set, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	cfg.Members, cfg.ProducerBudgetsPerDay = nil, f.ProducerBudgetsPerDay
	for _, e := range f.Providers {
		key, err := e.Key()
		if err != nil {
			return nil, err
		}
		var cl Client
		if e.Dialect == Tasks {
			cl, err = NewTasksClient(TasksConfig{BaseURL: e.BaseURL, APIKey: key, HTTPClient: base.HTTPClient,
				Timing: base.Timing, MinPollGap: scaled(PollGap(e.BaseURL), base.Timing.Scale), Now: base.Now})
		} else {
			svc, _ := e.service()
			c := base
			c.BaseURL, c.APIKey, c.Service = e.BaseURL, key, svc
			cl, err = solver.NewClient(c)
		}
		if err != nil {
			return nil, fmt.Errorf("provider %s: %w", e.Name, err)
		}
		cfg.Members = append(cfg.Members, Member{Entry: e, Client: cl})
	}
	return New(cfg)
}

// scaled is d times scale (solver.Timing.Scale; 0 is 1).
func scaled(d time.Duration, scale float64) time.Duration {
	if scale <= 0 {
		return d
	}
	return time.Duration(float64(d) * scale)
}

// SolvesElsewhere reports whether the Set has more than one provider: a
// worker then frees the thread of a captcha whose provider is silent
// for the next task, which may go to another (stream.WorkerConfig).
func (s *Set) SolvesElsewhere() bool { return len(s.members) > 1 }

// Members returns the Set's providers, in the file's order.
func (s *Set) Members() []Member {
	out := make([]Member, len(s.members))
	for i, m := range s.members {
		out[i] = m.Member
	}
	return out
}

// Solve solves req on the first provider that takes it: a captcha to
// resume on the provider that accepted it (req.Provider), a new one on
// the primaries that solve its method, then on the fallbacks while every
// primary is out. When a primary is up and every plan is full, the
// overflow decides (Config.Overflow): the cheapest overflow provider, or
// the plan's refusal, a capacity wait. The Answer names its provider and
// cost.
func (s *Set) Solve(ctx context.Context, req solver.Request) (solver.Answer, error) {
	if req.CaptchaID != "" {
		if m := s.named(req.Provider); m != nil {
			ans, err, _ := s.solveOn(ctx, m, req, nil)
			return ans, err
		}
		s.log.LogAttrs(ctx, slog.LevelWarn, "a captcha to resume names a provider the set does not have; submitting anew",
			slog.String("provider", req.Provider), slog.String("captcha_id", req.CaptchaID))
		req.CaptchaID, req.Provider = "", ""
	}
	route := s.route(req.Method)
	if req.Unsolvable != "" {
		route = askedLast(route, req.Unsolvable)
	}
	if len(route) == 0 {
		return solver.Answer{}, &solver.Error{Code: solver.CodeInvalidParams, Class: retry.Permanent, Op: "validate",
			Err: fmt.Errorf("no provider solves method %q", req.Method)}
	}
	// over is a budget's refusal: the answer only when no provider that
	// is merely out (it may take the task within every cap once it
	// answers) was passed over (last).
	var last, full, over error
	var fullOn *member
	for _, m := range route {
		if m.Entry.Role == Fallback && full != nil {
			break // a primary answers: its plan is full, not out
		}
		if code, out := m.refused(s.now()); out {
			last = passedOver(m.Entry.Name, code)
			continue
		}
		r, err := s.reserve(ctx, m, req)
		if solver.CodeOf(err) == CodeBudgetExceeded {
			over = err
			continue
		}
		if err != nil {
			last = err
			continue
		}
		ans, err, accepted := s.solveOn(ctx, m, req, r)
		if err == nil || accepted || ctx.Err() != nil {
			return ans, err
		}
		if m.planFull(err) {
			if full == nil {
				full, fullOn = err, m
			}
			continue
		}
		if !movesOn(err) {
			return ans, err
		}
		if solver.ClassOf(err) == retry.Fatal {
			m.refuse(s.now().Add(s.outFor), solver.CodeOf(err))
			s.log.LogAttrs(ctx, slog.LevelWarn, "the provider refuses the key or has no funds: passed over for a while",
				slog.String("provider", m.Entry.Name), slog.String("code", solver.CodeOf(err)), slog.Duration("for", s.outFor))
		}
		last = err
	}
	if full != nil {
		if ans, err, took := s.overflow(ctx, req, fullOn); took {
			return ans, err
		}
		return s.noWorkers(ctx, req, route, fullOn, full)
	}
	if over != nil && (last == nil || solver.ClassOf(last) == retry.Fatal) {
		// Every provider is over a cap, or refuses the key or has no
		// funds: the task ends, before anything is paid.
		return solver.Answer{}, over
	}
	return solver.Answer{}, last
}

// passedOver is why provider name was not asked: it refused the key or
// had no funds (code) a moment ago. Fatal as code is: when every provider
// of a method is passed over, the worker stops as it does with one.
func passedOver(name, code string) error {
	return &solver.Error{Code: code, Class: retry.Fatal, Op: "in.php",
		Err: fmt.Errorf("provider %s: passed over: it refused the key or had no funds", name)}
}

// solveOn solves req on m, r the price it reserved for it in the day's
// spend (reserve; nil for a captcha resumed), which it settles; accepted
// reports whether m accepted a captcha for it (it is paid there, whatever
// the error).
func (s *Set) solveOn(ctx context.Context, m *member, req solver.Request, r *reservation) (ans solver.Answer, err error, accepted bool) {
	name := m.Entry.Name
	fresh := 0 // captchas m accepted for req, resumed ones aside
	defer func() { s.settle(ctx, m, req, r, fresh, accepted, ans, err) }()
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var claimed, pooled []string
	defer func() {
		m.release(claimed)
		s.poolRelease(ctx, name, pooled)
	}()
	detached := false // the captcha waits here without a worker thread
	defer func() {
		if detached {
			m.detached.Add(-1)
		}
	}()
	reused := ""
	var sent time.Time // when the submission went, at the latest
	cctx = solver.WithAccepted(cctx, func(a solver.Accepted) {
		accepted = true
		// A captcha resumed is this task's by its own record (the
		// accepted event of its last attempt): its claim, if a worker
		// that died holds it, expires on its own (stream.ClaimTTL).
		pool := !a.Resumed
		if pool {
			fresh++
		}
		local := m.claim(a.ID)
		if !local || pool && !s.poolClaim(ctx, name, a.ID) {
			if local {
				// Another worker holds it: it may have claimed the id
				// before the provider gave it to this submission, or
				// after; unless before, neither knows whose it is.
				s.poolContest(ctx, name, a.ID, sent)
			}
			// Another task polls that captcha, in this worker or
			// another: its answer is not this task's, and the id is not
			// recorded as this task's.
			if local {
				m.release([]string{a.ID})
			}
			reused = a.ID
			cancel()
			return
		}
		if pool {
			pooled = append(pooled, a.ID)
		}
		claimed = append(claimed, a.ID)
		a.Provider = name
		solver.TellAccepted(ctx, a)
		if !detached && m.detach() {
			detached = true
			solver.Detach(ctx)
		}
	})
	sent = s.now()
	ans, err = m.Client.Solve(cctx, req)
	accepted = accepted || req.CaptchaID != ""
	if err == nil && slices.Contains(pooled, ans.CaptchaID) && s.poolContested(ctx, name, ans.CaptchaID) {
		return solver.Answer{}, replyLost{&solver.Error{Code: CodeReusedID, Class: retry.Transient, Op: "in.php", CaptchaID: ans.CaptchaID,
			Err: fmt.Errorf("provider %s gave captcha id %s to another worker's submission too, whose claim came first: its answer may be the other task's (this submission may have been charged)", name, ans.CaptchaID)}}, true
	}
	if reused != "" && ctx.Err() == nil {
		return solver.Answer{}, replyLost{&solver.Error{Code: CodeReusedID, Class: retry.Transient, Op: "in.php", CaptchaID: reused,
			Err: fmt.Errorf("provider %s answered a new submission with captcha id %s, which another task polls (it may have charged it)", name, reused)}}, true
	}
	if err != nil {
		return ans, onProvider{name, err}, accepted
	}
	ans.Provider = name
	if ans.CostBasis == "" { // the provider did not say (CostReported)
		ans.Cost, ans.CostBasis = m.Entry.Billing.Price(req.Method), CostPrice
		if m.Entry.Billing.Plan() {
			ans.CostBasis = CostPlan
		}
	}
	return ans, nil, accepted
}

// onProvider is a failure on the provider it names: a trail that says a
// submission may have been paid says where.
type onProvider struct {
	name string
	err  error
}

func (e onProvider) Error() string { return fmt.Sprintf("provider %s: %v", e.name, e.err) }
func (e onProvider) Unwrap() error { return e.err }

// Provider names the provider (solver.ProviderOf).
func (e onProvider) Provider() string { return e.name }

// detach takes one of m's places for a captcha that waits there without
// a worker thread: false on a thread plan, whose captchas hold theirs,
// and when every place is taken (Entry.MaxInFlight).
func (m *member) detach() bool {
	most := int32(m.Entry.maxInFlight())
	if most == 0 {
		return false
	}
	if m.detached.Add(1) > most {
		m.detached.Add(-1)
		return false
	}
	return true
}

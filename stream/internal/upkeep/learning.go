// Sharing what a worker's solving client learns with the pool
// (topology.TimingsBucket, pool.OccupancySubject).

package upkeep

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// Learner is a client of the solving service that learns: its solve
// times, which it merges with a store's, and the plan window it keeps
// (solver.Client; stream.Learner).
type Learner interface {
	// ShareTimings merges what the client learned into store and polls
	// with the result.
	ShareTimings(ctx context.Context, store solver.TimingStore) error
	// PlanWindow is the plan window learned so far; 0 when it learns none.
	PlanWindow() int
	// PlanReached reports whether the service refused the client for want
	// of plan threads: only then is PlanWindow a plan size learned.
	PlanReached() bool
	// ShareSoon receives when what the client learned should be shared
	// before the next periodic share (the first answers of a kind).
	ShareSoon() <-chan struct{}
	// AdoptTimings plans with the timings another worker merged into the
	// pool's store.
	AdoptTimings(pooled map[string]solver.Learned)
	// JoinPool makes the client's early hand-back of plan threads keep
	// one margin with the pool's other workers (solver.Pool).
	JoinPool(p solver.Pool)
}

// toldPlan is a Learner whose plan the service may tell
// (solver.Client.PlanTold).
type toldPlan interface {
	PlanTold() bool
	PlanToldThreads() int
	SharePlan(share int)
}

// pooledPlan is a Learner a plan-wide quota may bound instead of its own
// plan window (solver.Client.PoolQuota), and that says when the service
// told its plan (solver.Client.PlanToldAt).
type pooledPlan interface {
	PoolQuota(on bool)
	PlanToldAt() time.Time
}

// planAccount is a Learner that says which account the plan the service
// tells is of (solver.Client.PlanAccount).
type planAccount interface {
	PlanAccount() string
}

// accountOf is the account of l's told plan; "" when l does not say.
func accountOf(l Learner) string {
	if a, ok := l.(planAccount); ok {
		return a.PlanAccount()
	}
	return ""
}

// QuotaWait bounds how long a worker whose service told the plan waits,
// before its first task, for the server that follows the service's
// readings (stream.Admin.FollowServicePlan) to set the plan-wide quota
// from it; a server that follows sets it within milliseconds of the
// reading. Past it the worker holds its share of the plan (toldShare).
const QuotaWait = 5 * time.Second

// quotaPoll is how often that wait looks at the quota.
const quotaPoll = 25 * time.Millisecond

// toldShare is worker's share of a plan of told threads of account among
// the workers in ws that hold it (PlanWindow.Told of the same
// PlanWindow.Account): an equal part, the remainder one each to the
// first by name, at least one. Workers on another account hold another
// plan, and take no share of this one.
func toldShare(ws map[string]pool.PlanWindow, worker, account string, told int) int {
	var names []string
	for name, w := range ws {
		if (w.Told > 0 && w.Account == account) || name == worker {
			names = append(names, name)
		}
	}
	if !slices.Contains(names, worker) {
		names = append(names, worker)
	}
	slices.Sort(names)
	share := told / len(names)
	if slices.Index(names, worker) < told%len(names) {
		share++
	}
	return max(share, 1)
}

// Learning starts the learner with the pool's learned solve times and
// shares what it learns with the pool every Every and when the learner
// asks (the first answers of a kind), and plans with what other workers
// merge as they merge it, until it stops, when it shares once more. It
// also joins the pool's occupancy reports (pool.OccupancySubject). Without
// the bucket (a server whose admin has not run init since it exists) the
// worker says so once and learns alone.
type Learning struct {
	// Learner is the client whose learning is shared.
	Learner Learner
	// Name is the worker's; Now its clock.
	Name string
	Now  func() time.Time
	// Clock is the worker's reading of the broker's clock, on which its
	// plan window is stamped (pool.PlanWindow.At, ToldAt) and the pool's
	// windows are judged fresh: a worker whose clock is minutes off its
	// peers' must neither find their windows stale nor have its own found
	// so, or it would hold the whole plan beside their shares. Nil: Now.
	Clock *jscall.BrokerClock
	// Every is how often it shares (stream.WorkerConfig.ShareTimingsEvery).
	Every time.Duration
	// NC, JS and Domain reach the pool's bucket.
	NC     *nats.Conn
	JS     jetstream.JetStream
	Domain string
	Log    *slog.Logger
	// Requota, when set, makes the worker's plan gate look for the
	// plan-wide quota at once (dispatcher.PlanGate.Refresh): it was just
	// set or removed.
	Requota func()

	leave  []func()
	mu     sync.Mutex
	pooled bool // a plan-wide quota bounds the learner (pooledPlan); under mu
	// heldService: the quota bounding the learner is the service's, as
	// last said; under mu.
	heldService bool
	// lifted receives when the worker's plan gate found the quota gone
	// (QuotaLifted): the worker shares its reading at once, so that a
	// server that follows sets the service's quota again.
	lifted chan struct{}
	// accounts receives when the readings became of several accounts:
	// the server removes the quota set from them, and this worker then
	// holds its own account's plan at once, not at its next share.
	accounts chan struct{}
	share    func(ctx context.Context)
	last     context.Context
	r        runner
}

// Start shares once, before the first task, and then until ctx ends or
// Stop. It never fails: what it cannot join, it says in the log.
func (l *Learning) Start(ctx context.Context) error {
	l.last = context.WithoutCancel(ctx)
	if occ, stop, err := pool.JoinOccupancy(l.NC, l.Name); err != nil {
		l.Log.Warn("plan threads are handed back with this worker's own margin", slog.Any("error", err))
	} else {
		l.Learner.JoinPool(occ)
		l.leave = append(l.leave, stop)
	}
	// The bucket only: without it, no more requests (a worker's role may
	// not ask which domain it reached, as stream.OpenTimings does to say so).
	kv, err := l.JS.KeyValue(ctx, topology.TimingsBucket)
	if err != nil {
		if errors.Is(err, jetstream.ErrBucketNotFound) {
			err = fmt.Errorf("timings bucket %s not found: an admin creates it (`captchaq init`)", topology.TimingsBucket)
		}
		l.Log.Warn("solve times are not shared with the pool: this worker learns alone", slog.Any("error", err))
		return nil
	}
	store := pool.NewTimings(kv)
	account := accountOf(l.Learner)
	// Every worker reads the account's whole plan: each holds its share
	// of it, so that together the account's workers hold the plan. The
	// share follows every worker's write of its window, so that workers
	// started together split the plan as each reports, not at the next
	// periodic share.
	l.accounts = make(chan struct{}, 1)
	l.mu.Lock()
	l.lifted = make(chan struct{}, 1)
	l.mu.Unlock()
	follow := func(ws map[string]pool.PlanWindow) {
		if t, ok := l.Learner.(toldPlan); ok && t.PlanTold() {
			t.SharePlan(toldShare(ws, l.Name, account, t.PlanToldThreads()))
		}
		if _, accounts := pool.ServiceReading(ws); accounts > 1 {
			select {
			case l.accounts <- struct{}{}:
			default:
			}
		}
	}
	// Each worker's window is followed at its newest (PlanWindow.At): a
	// write's message (FollowTimings) and this worker's read of the store
	// after its share race, and either may be the older; a share computed
	// from windows before another worker's write, set after the one
	// computed from that write, would leave this worker the whole plan
	// beside the other's share.
	var following sync.Mutex
	known := map[string]pool.PlanWindow{}
	followNewest := func(ws map[string]pool.PlanWindow) {
		following.Lock()
		defer following.Unlock()
		for name, w := range ws {
			if k, ok := known[name]; !ok || w.At.After(k.At) {
				known[name] = w
			}
		}
		now := l.brokerNow()
		for name, w := range known {
			if now.Sub(w.At) > pool.WindowFresh {
				delete(known, name)
			}
		}
		follow(maps.Clone(known))
	}
	if stop, err := pool.FollowTimings(l.NC, l.Domain, l.Learner.AdoptTimings, l.brokerNow, followNewest); err != nil {
		l.Log.Warn("other workers' solve times and plan windows reach this worker only at its periodic share", slog.Any("error", err))
	} else {
		l.leave = append(l.leave, stop)
	}
	reshare := func(ctx context.Context) error {
		ws, err := store.Windows(ctx, l.brokerNow())
		if err == nil {
			followNewest(ws)
		}
		return err
	}
	warned, first := false, true
	l.share = func(ctx context.Context) {
		err := l.Learner.ShareTimings(ctx, store)
		// A window is a plan size only once the service has refused a
		// submission for want of threads, or told its plan.
		told := 0
		if t, ok := l.Learner.(toldPlan); ok && t.PlanTold() {
			told = t.PlanToldThreads()
		}
		if n := l.Learner.PlanWindow(); n > 0 && (l.Learner.PlanReached() || told > 0) && err == nil {
			w := pool.PlanWindow{Limit: n, Told: told, At: l.brokerNow()}
			if p, ok := l.Learner.(pooledPlan); ok && told > 0 {
				w.ToldAt, w.Account = l.brokerTime(p.PlanToldAt()), account
			}
			err = store.PutPlanWindow(ctx, l.Name, w)
		}
		if err == nil {
			err = l.followQuota(ctx, store, told, first)
		}
		first = false
		if told > 0 && err == nil {
			err = reshare(ctx) // this worker's own write may land before its subscription
		}
		if err != nil && ctx.Err() == nil && !warned {
			warned = true
			l.Log.Warn("could not share learned solve times; polling on with this worker's own", slog.Any("error", err))
		}
	}
	// The pool's timings before the first task, then every interval.
	l.share(ctx)
	l.r.run(ctx, func(ctx context.Context) {
		t := time.NewTicker(l.Every)
		defer t.Stop()
		soon := l.Learner.ShareSoon()
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
			case <-t.C:
				l.share(ctx)
			case <-soon:
				l.share(ctx)
			case <-l.accounts:
				if l.isPooled() {
					l.share(ctx)
				}
			case <-l.lifted:
				l.share(ctx)
			}
		}
	})
	return nil
}

// followQuota makes the learner bounded by the plan-wide quota while one
// is set (pooledPlan): by the one the server set from the plan the
// service told (told, this worker's reading, which it just wrote), or an
// operator's. Before the first task (first), a worker told a plan that
// the quota does not say yet waits for a server that follows the
// readings (pool.Timings.PlanFollowed) to set it, up to QuotaWait, so
// that its first captchas hold plan threads.
func (l *Learning) followQuota(ctx context.Context, store *pool.Timings, told int, first bool) error {
	p, ok := l.Learner.(pooledPlan)
	if !ok {
		return nil
	}
	plan, err := dispatcher.ReadGatedPlan(ctx, l.JS)
	if err != nil {
		return err
	}
	// Readings of several accounts set no quota, and the server removes
	// one it set from them (stream.Admin.FollowServicePlan), if it has
	// not yet: none to hold, none to wait for.
	accounts := 0
	if plan.FromService || (first && told > 0) {
		ws, err := store.Windows(ctx, l.brokerNow())
		if err != nil {
			return err
		}
		_, accounts = pool.ServiceReading(ws)
	}
	if accounts > 1 && plan.FromService {
		l.awaitRemoval(ctx)
		plan = dispatcher.Plan{}
	}
	settled := func(q dispatcher.Plan) bool { return q.Threads > 0 && (!q.FromService || q.Threads == told) }
	if first && told > 0 && !settled(plan) {
		followed, err := store.PlanFollowed(ctx, l.brokerNow())
		if err != nil {
			return err
		}
		if followed && accounts > 1 {
			l.Log.Info("the pool's workers read the plans of several accounts: no plan-wide quota is set from them, this worker holds its share of its own account's plan",
				slog.Int("accounts", accounts), slog.Int("told_threads", told))
			followed = false
		}
		if followed {
			wctx, cancel := context.WithTimeout(ctx, QuotaWait)
			several := false // readings of another account came meanwhile: no quota comes
			for !settled(plan) && wctx.Err() == nil && !several {
				select {
				case <-wctx.Done():
				case <-l.accounts:
					several, plan = true, dispatcher.Plan{}
				case <-time.After(quotaPoll):
					if q, err := dispatcher.ReadGatedPlan(wctx, l.JS); err == nil {
						plan = q
					}
				}
			}
			cancel()
			if several {
				l.Log.Info("another account's plan was read meanwhile: no plan-wide quota is set from the readings, this worker holds its share of its own account's plan",
					slog.Int("told_threads", told))
			} else if !settled(plan) && ctx.Err() == nil {
				l.Log.Warn("the server set no plan-wide quota from the plan the service told: this worker holds its share of it",
					slog.Int("told_threads", told), slog.Duration("waited", QuotaWait))
			}
		}
	}
	l.mu.Lock()
	pooled := plan.Threads > 0
	changed := pooled != l.pooled
	// Said when the quota held becomes the service's, also straight from
	// an operator's: the operator's removed and the service's set before
	// this worker looked in between (TestAQuotaRemovedLeavesTheWorkerBoundedByItsPlan
	// waited for the line in vain, 1 run of 20).
	fromService := pooled && plan.FromService
	announce := fromService && !l.heldService
	l.heldService = fromService
	if changed {
		l.pooled = pooled
		// The gate looks for the quota before the window stops bounding,
		// and the window bounds again before the gate lets the quota go.
		if pooled && l.Requota != nil {
			l.Requota()
		}
		p.PoolQuota(pooled)
		if !pooled && l.Requota != nil {
			l.Requota()
		}
	}
	l.mu.Unlock()
	if announce {
		l.Log.Info("holding the plan-wide quota set from the plan the service told", slog.Int("threads", plan.Threads))
	}
	return nil
}

// brokerNow is the broker's clock now, as the worker reads it (Clock).
func (l *Learning) brokerNow() time.Time { return l.brokerTime(l.Now()) }

// brokerTime is t, a time of the worker's clock, on the broker's clock;
// the zero time stays zero.
func (l *Learning) brokerTime(t time.Time) time.Time {
	if l.Clock == nil || t.IsZero() {
		return t
	}
	return l.Clock.BrokerTime(t)
}

// isPooled reports whether a plan-wide quota bounds the learner.
func (l *Learning) isPooled() bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pooled
}

// QuotaLifted is called when the worker's plan gate finds the plan-wide
// quota gone (dispatcher.PlanGate.OnLifted): the learner's own plan
// window bounds it again at once, not at its next share (up to Every
// later, meanwhile bounded by nothing but the worker's threads), and the
// worker shares its reading soon, from which a server that follows the
// service's plan sets the quota again.
func (l *Learning) QuotaLifted() {
	l.mu.Lock()
	defer l.mu.Unlock()
	p, ok := l.Learner.(pooledPlan)
	if !ok || !l.pooled {
		return // not bounded by a quota: nothing to do, nothing to share
	}
	l.pooled, l.heldService = false, false
	p.PoolQuota(false)
	if l.lifted != nil {
		select {
		case l.lifted <- struct{}{}:
		default:
		}
	}
}

// awaitRemoval waits up to QuotaWait for the server to remove the quota it
// set from readings now of several accounts, so that the worker's plan
// gate, looking again (Requota), finds none rather than a quota about to
// go, whose threads it would wait for in vain until it looks again.
func (l *Learning) awaitRemoval(ctx context.Context) {
	wctx, cancel := context.WithTimeout(ctx, QuotaWait)
	defer cancel()
	for wctx.Err() == nil {
		if q, err := dispatcher.ReadPlan(wctx, l.JS); err == nil && !q.FromService {
			return
		}
		select {
		case <-wctx.Done():
		case <-time.After(quotaPoll):
		}
	}
}

// Stop stops sharing, leaves the pool's reports and shares once more:
// what this worker learned since the last share outlives it.
func (l *Learning) Stop() {
	l.r.stop()
	for _, f := range l.leave {
		f()
	}
	l.leave = nil
	if share := l.share; share != nil {
		l.share = nil
		last, stop := context.WithTimeout(l.last, 2*time.Second)
		defer stop()
		share(last)
	}
}

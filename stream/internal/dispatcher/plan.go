package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
)

// The plan-wide thread quota lives in a stream of its own: one message per
// thread of the plan. A worker must hold one (delivered, not yet acked) while
// it talks to the service about a captcha, and gives it back with a Nak the
// moment the service is done with it. The server hands each message to one
// holder at a time, so the quota holds across every worker process and
// machine; a holder that dies gives its thread back after AckWait, like any
// task; a live holder keeps it with InProgress. A smaller quota retires
// the surplus of held threads (PlanMetaRetiring): their holders ack them
// instead, which removes them, as their captchas end. No lock service, no
// clock agreement, nothing outside JetStream.
const (
	PlanStream      = "CAPTCHA_PLAN"
	PlanSubject     = "captcha-plan.threads"
	PlanConsumer    = "plan-threads"
	PlanMetaThreads = "captchaq.plan_threads"
	PlanMetaEarly   = "captchaq.plan_early"
	// PlanMetaSource says who set the quota: PlanSourceService when the
	// server set it from the plan the service told the workers
	// (stream.Admin.FollowServicePlan); absent when an operator did.
	PlanMetaSource    = "captchaq.plan_source"
	PlanSourceService = "service"
	// PlanMetaRetiring lists, comma-separated, the stream sequences of
	// threads a smaller quota retires while their holders still have a
	// captcha at the service (topology.EnsurePlan). Their holder acks the
	// thread instead of giving it back, and under the stream's interest
	// retention the ack removes it: the thread leaves the pool when its
	// captcha is done, never while the service still has it.
	PlanMetaRetiring = "captchaq.plan_retiring"
)

// ParseRetiring returns the retiring threads' sequences of the plan
// stream's metadata (PlanMetaRetiring), ignoring what is not one.
func ParseRetiring(meta map[string]string) map[uint64]bool {
	out := map[uint64]bool{}
	for _, f := range strings.Split(meta[PlanMetaRetiring], ",") {
		if seq, err := strconv.ParseUint(f, 10, 64); err == nil {
			out[seq] = true
		}
	}
	return out
}

// Plan is the plan-wide thread quota as its stream says it.
type Plan struct {
	// Threads is the quota; 0: none is set.
	Threads int
	// Early: its threads are given back early (stream.PlanEarly).
	Early bool
	// FromService: the server set it from the plan the service told
	// (PlanSourceService), not an operator.
	FromService bool
}

// ReadPlan returns the plan-wide thread quota (Threads 0: none).
func ReadPlan(ctx context.Context, js jetstream.JetStream) (Plan, error) {
	p, _, err := readPlan(ctx, js)
	return p, err
}

// readPlan is ReadPlan, with the threads the quota retires
// (PlanMetaRetiring).
func readPlan(ctx context.Context, js jetstream.JetStream) (Plan, map[uint64]bool, error) {
	s, err := js.Stream(ctx, PlanStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return Plan{}, nil, nil
	}
	if err != nil {
		return Plan{}, nil, fmt.Errorf("plan stream: %w", err)
	}
	meta := s.CachedInfo().Config.Metadata
	p, err := PlanOf(meta)
	if err != nil {
		return Plan{}, nil, err
	}
	return p, ParseRetiring(meta), nil
}

// PlanOf returns the quota the plan stream's metadata meta holds.
func PlanOf(meta map[string]string) (Plan, error) {
	n, err := strconv.Atoi(meta[PlanMetaThreads])
	if err != nil {
		return Plan{}, fmt.Errorf("plan stream: bad %s metadata: %w", PlanMetaThreads, err)
	}
	return Plan{Threads: n, Early: meta[PlanMetaEarly] == "true", FromService: meta[PlanMetaSource] == PlanSourceService}, nil
}

// ReadGatedPlan is ReadPlan as a worker's PlanGate can hold it: no quota
// (Threads 0) while the plan's consumer is not there yet. An admin sets a
// quota in steps (topology.EnsurePlan: the stream with its metadata, then
// the consumer, then the threads), and a gate that looks between the
// first two finds no quota, and keeps that for planRefresh: a worker that
// then stopped bounding its captchas by its own plan window, the quota
// bounding them instead (solver.Client.PoolQuota), would be bounded by
// neither.
func ReadGatedPlan(ctx context.Context, js jetstream.JetStream) (Plan, error) {
	p, err := ReadPlan(ctx, js)
	if err != nil || p.Threads == 0 {
		return p, err
	}
	_, err = js.Consumer(ctx, PlanStream, PlanConsumer)
	switch {
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
		return Plan{}, nil
	case err != nil:
		return Plan{}, fmt.Errorf("plan consumer: %w", err)
	}
	return p, nil
}

// PlanSettings returns the plan-wide thread quota (0: none) and whether its
// threads are given back early (stream.PlanEarly).
func PlanSettings(ctx context.Context, js jetstream.JetStream) (threads int, early bool, err error) {
	p, err := ReadPlan(ctx, js)
	return p.Threads, p.Early, err
}

// planRefresh is how often a worker looks whether the plan quota was set,
// changed or removed. stream.SetPlan states its value to users.
const planRefresh = 10 * time.Second

// PlanThread is one held thread of the plan. Release gives it back at once;
// it is safe to call more than once.
type PlanThread struct {
	m        jetstream.Msg
	gate     *PlanGate
	once     sync.Once
	released atomic.Bool
	wait     time.Duration // the plan consumer's ack wait
}

// Release gives the thread back (Nak), or, when a smaller quota retires
// it (PlanMetaRetiring), acks it, which removes it from the plan: its
// captcha is done at the service, so the pool shrinks to the quota
// without taking a thread from a captcha the service still has. A thread retired after its holder's
// gate last looked is given back free, and the next Acquire, which looks
// again, removes it instead of handing it out.
func (p *PlanThread) Release() {
	if p == nil {
		return
	}
	p.once.Do(func() {
		p.released.Store(true)
		if p.gate != nil && p.gate.retires(p.m) {
			_ = p.m.Ack()
			return
		}
		_ = p.m.Nak()
	})
}

// AckWait is the plan consumer's ack wait, 0 when unknown.
func (p *PlanThread) AckWait() time.Duration {
	if p == nil {
		return 0
	}
	return p.wait
}

// KeepAlive extends the lease of a thread not given back yet.
func (p *PlanThread) KeepAlive() {
	if p != nil && !p.released.Load() {
		_ = p.m.InProgress()
	}
}

// PlanGate hands out plan threads to a worker.
type PlanGate struct {
	JS    jetstream.JetStream
	mu    sync.Mutex
	cons  jetstream.Consumer // nil: no quota
	early bool               // the quota's threads are given back early (stream.PlanEarly)
	// retiring: the threads the quota retires at the gate's last look
	// (PlanMetaRetiring).
	retiring map[uint64]bool
	checked  time.Time
	lifted   func()
}

// OnLifted has the gate call f each time it looks for the quota and finds
// none (removed by an operator, or by the server that follows the
// service's plan), before Acquire hands out nothing to hold: whatever the
// quota bounded instead (solver.Client.PoolQuota) must bound again.
func (g *PlanGate) OnLifted(f func()) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.lifted = f
}

// EarlyRelease returns ctx, under which the solver gives t back when its
// captcha is probably solved, if the quota says so (stream.PlanEarly); else ctx.
func (g *PlanGate) EarlyRelease(ctx context.Context, t *PlanThread) context.Context {
	if t == nil {
		return ctx
	}
	g.mu.Lock()
	early := g.early
	g.mu.Unlock()
	if !early {
		return ctx
	}
	return solver.WithProbablyReady(ctx, t.Release)
}

// Refresh makes the next Acquire look for the quota again at once: it was
// just set, changed or removed.
func (g *PlanGate) Refresh() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.checked = time.Time{}
}

// consumer returns the plan's consumer, nil when no quota is set, looking
// again at most every planRefresh.
func (g *PlanGate) consumer(ctx context.Context, now time.Time) jetstream.Consumer {
	g.mu.Lock()
	if !g.checked.IsZero() && now.Sub(g.checked) < planRefresh {
		defer g.mu.Unlock()
		return g.cons
	}
	g.checked = now
	c, err := g.JS.Consumer(ctx, PlanStream, PlanConsumer)
	switch {
	case err == nil:
		g.cons = c
		if p, retiring, err := readPlan(ctx, g.JS); err == nil {
			g.early, g.retiring = p.Early, retiring
		}
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
		g.cons, g.early, g.retiring = nil, false, nil
	}
	// On other errors keep what we had: a jscall.Passing broker problem must not
	// lift the quota.
	cons, lifted := g.cons, g.lifted
	g.mu.Unlock()
	if cons == nil && lifted != nil {
		lifted()
	}
	return cons
}

// retires reports whether m's thread is retiring (PlanMetaRetiring) in
// the gate's view (lookRetiring). One that names it is read again first:
// a larger quota set meanwhile takes retiring threads back before it
// publishes new ones (topology.EnsurePlan), and an ack would remove a
// thread it counts.
func (g *PlanGate) retires(m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil {
		return false
	}
	if !g.named(md.Sequence.Stream) {
		return false
	}
	g.lookRetiring(context.Background())
	return g.named(md.Sequence.Stream)
}

// named reports whether the gate's view names seq retiring.
func (g *PlanGate) named(seq uint64) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.retiring[seq]
}

// lookRetiring reads the plan stream's retiring threads into the gate's
// view. Acquire reads them before it hands out the threads it took, as
// the gate's other look is up to planRefresh old: a retiring thread given
// back free would go to the next captcha, over the smaller quota. One
// read of the stream's info per Acquire that took a thread, beside the
// service's calls for its captcha. On an error the view stays as it was.
func (g *PlanGate) lookRetiring(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, retireReadWait)
	defer cancel()
	if _, retiring, err := readPlan(ctx, g.JS); err == nil {
		g.mu.Lock()
		g.retiring = retiring
		g.mu.Unlock()
	}
}

// retireReadWait bounds lookRetiring's read of the plan stream.
const retireReadWait = 2 * time.Second

// Acquire takes up to n plan threads, waiting up to wait for the first when
// none is free. With no quota it returns n nil threads: nothing to hold.
func (g *PlanGate) Acquire(ctx context.Context, n int, wait time.Duration, now time.Time) ([]*PlanThread, error) {
	c := g.consumer(ctx, now)
	if c == nil {
		return make([]*PlanThread, n), nil
	}
	var out []*PlanThread
	lease := c.CachedInfo().Config.AckWait
	// take hands out the threads fetched, but acks (removes) the ones
	// the quota retires, free now.
	take := func(ms []jetstream.Msg) {
		if len(ms) > 0 {
			g.lookRetiring(ctx)
		}
		for _, m := range ms {
			if md, err := m.Metadata(); err == nil && g.named(md.Sequence.Stream) {
				_ = m.Ack()
				continue
			}
			out = append(out, &PlanThread{m: m, gate: g, wait: lease})
		}
	}
	batch, err := c.FetchNoWait(n)
	if err == nil {
		take(collect(batch))
		err = batch.Error()
	}
	if len(out) > 0 || (err != nil && !errors.Is(err, jetstream.ErrNoMessages)) {
		if err = ignoreNoMessages(err); err != nil {
			g.Refresh()
		}
		return out, err
	}
	batch, err = c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		g.Refresh() // the quota may be gone: look again at the next call, not in planRefresh
		return nil, err
	}
	take(collect(batch))
	if err := ignoreNoMessages(batch.Error()); err != nil {
		g.Refresh()
		return out, err
	}
	return out, nil
}

// collect returns batch's messages.
func collect(batch jetstream.MessageBatch) []jetstream.Msg {
	var ms []jetstream.Msg
	for m := range batch.Messages() {
		ms = append(ms, m)
	}
	return ms
}

func ignoreNoMessages(err error) error {
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

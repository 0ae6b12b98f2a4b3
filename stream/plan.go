package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
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
// task; a live holder keeps it with InProgress. No lock service, no clock
// agreement, nothing outside JetStream.
const (
	planStreamName   = "CAPTCHA_PLAN"
	planSubject      = "captcha-plan.threads"
	planConsumerName = "plan-threads"
	planMetaThreads  = "captchaq.plan_threads"
	planMetaEarly    = "captchaq.plan_early"
)

// PlanOption is an optional setting of SetPlan.
type PlanOption func(*planOptions)

type planOptions struct{ early bool }

// PlanEarly makes workers give a plan thread back when the captcha holding it
// is probably solved at the service (solver.WithProbablyReady), not when its
// answer is fetched, so the next captcha is submitted about when the service
// frees the thread. The service then may, for a moment, be sent more
// captchas than the plan's threads: a wrong guess is refused there with a
// capacity code (no attempt spent), and the solver guesses later after
// each refusal. Without it captchaq never has more captchas at the
// service than the quota.
func PlanEarly() PlanOption { return func(o *planOptions) { o.early = true } }

// SetPlan sets the plan-wide thread quota: at most threads captchas are at
// the solving service at once, across all workers. Zero removes the quota
// (each worker's --threads alone limits it). It is the one place the quota is
// set; workers pick a change up within planRefresh. Threads held while the
// quota changes are given back as their solves end, so for a moment the old
// holders and the new quota may overlap.
func SetPlan(ctx context.Context, js jetstream.JetStream, t Topology, threads int, opts ...PlanOption) error {
	t = t.withDefaults()
	var o planOptions
	for _, opt := range opts {
		opt(&o)
	}
	if threads < 0 {
		return fmt.Errorf("plan threads %d: want 0 or more", threads)
	}
	if threads == 0 {
		err := js.DeleteStream(ctx, planStreamName)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("remove the plan quota: %w", err)
		}
		return nil
	}
	storage := t.storage()
	// Exactly threads messages, and no room for one more: whatever anyone
	// publishes on the plan's subject, or has a push consumer deliver there
	// (JetStream does not check a consumer's deliver subject against its
	// creator's publish permissions), is refused, so the quota is only ever
	// what the admin set.
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        planStreamName,
		Description: "captchaq: one message per thread of the solving plan",
		Subjects:    []string{planSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     int64(threads),
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    t.Replicas,
		Metadata:    map[string]string{planMetaThreads: strconv.Itoa(threads), planMetaEarly: strconv.FormatBool(o.early)},
	})
	if err != nil {
		return fmt.Errorf("plan stream: %w", err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       planConsumerName,
		Description:   "captchaq workers hold one message per captcha at the service",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		return fmt.Errorf("plan consumer: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("plan stream: %w", err)
	}
	if info.State.Msgs == uint64(threads) {
		return nil
	}
	if err := s.Purge(ctx); err != nil {
		return fmt.Errorf("reset plan threads: %w", err)
	}
	gen := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range threads {
		if _, err := js.Publish(ctx, planSubject, []byte(strconv.Itoa(i)), jetstream.WithMsgID("thread-"+gen+"-"+strconv.Itoa(i))); err != nil {
			return fmt.Errorf("plan thread %d: %w", i, err)
		}
	}
	return nil
}

// storage is where the streams keep their messages: on disk, in memory with
// Memory.
func (t Topology) storage() jetstream.StorageType {
	if t.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// PlanThreads returns the plan-wide thread quota, 0 when none is set.
func PlanThreads(ctx context.Context, js jetstream.JetStream) (int, error) {
	n, _, err := planSettings(ctx, js)
	return n, err
}

// planSettings returns the plan-wide thread quota (0: none) and whether its
// threads are given back early (PlanEarly).
func planSettings(ctx context.Context, js jetstream.JetStream) (threads int, early bool, err error) {
	s, err := js.Stream(ctx, planStreamName)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("plan stream: %w", err)
	}
	meta := s.CachedInfo().Config.Metadata
	n, err := strconv.Atoi(meta[planMetaThreads])
	if err != nil {
		return 0, false, fmt.Errorf("plan stream: bad %s metadata: %w", planMetaThreads, err)
	}
	return n, meta[planMetaEarly] == "true", nil
}

// planRefresh is how often a worker looks whether the plan quota was set,
// changed or removed.
const planRefresh = 10 * time.Second

// planThread is one held thread of the plan. Release gives it back at once;
// it is safe to call more than once.
type planThread struct {
	m        jetstream.Msg
	once     sync.Once
	released atomic.Bool
	wait     time.Duration // the plan consumer's ack wait
}

func (p *planThread) Release() {
	if p == nil {
		return
	}
	p.once.Do(func() { p.released.Store(true); _ = p.m.Nak() })
}

// AckWait is the plan consumer's ack wait, 0 when unknown.
func (p *planThread) AckWait() time.Duration {
	if p == nil {
		return 0
	}
	return p.wait
}

// KeepAlive extends the lease of a thread not given back yet.
func (p *planThread) KeepAlive() {
	if p != nil && !p.released.Load() {
		_ = p.m.InProgress()
	}
}

// planGate hands out plan threads to a worker.
type planGate struct {
	js      jetstream.JetStream
	mu      sync.Mutex
	cons    jetstream.Consumer // nil: no quota
	early   bool               // the quota's threads are given back early (PlanEarly)
	checked time.Time
}

// earlyRelease returns ctx, under which the solver gives t back when its
// captcha is probably solved, if the quota says so (PlanEarly); else ctx.
func (g *planGate) earlyRelease(ctx context.Context, t *planThread) context.Context {
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

// consumer returns the plan's consumer, nil when no quota is set, looking
// again at most every planRefresh.
func (g *planGate) consumer(ctx context.Context, now time.Time) jetstream.Consumer {
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.checked.IsZero() && now.Sub(g.checked) < planRefresh {
		return g.cons
	}
	g.checked = now
	c, err := g.js.Consumer(ctx, planStreamName, planConsumerName)
	switch {
	case err == nil:
		g.cons = c
		if _, early, err := planSettings(ctx, g.js); err == nil {
			g.early = early
		}
	case errors.Is(err, jetstream.ErrStreamNotFound), errors.Is(err, jetstream.ErrConsumerNotFound):
		g.cons, g.early = nil, false
	}
	// On other errors keep what we had: a jscall.Passing broker problem must not
	// lift the quota.
	return g.cons
}

// acquire takes up to n plan threads, waiting up to wait for the first when
// none is free. With no quota it returns n nil threads: nothing to hold.
func (g *planGate) acquire(ctx context.Context, n int, wait time.Duration, now time.Time) ([]*planThread, error) {
	c := g.consumer(ctx, now)
	if c == nil {
		return make([]*planThread, n), nil
	}
	var out []*planThread
	lease := c.CachedInfo().Config.AckWait
	batch, err := c.FetchNoWait(n)
	if err == nil {
		for m := range batch.Messages() {
			out = append(out, &planThread{m: m, wait: lease})
		}
		err = batch.Error()
	}
	if len(out) > 0 || (err != nil && !errors.Is(err, jetstream.ErrNoMessages)) {
		return out, ignoreNoMessages(err)
	}
	batch, err = c.Fetch(1, jetstream.FetchMaxWait(wait))
	if err != nil {
		return nil, err
	}
	for m := range batch.Messages() {
		out = append(out, &planThread{m: m, wait: lease})
	}
	return out, ignoreNoMessages(batch.Error())
}

func ignoreNoMessages(err error) error {
	if errors.Is(err, jetstream.ErrNoMessages) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, context.DeadlineExceeded) {
		return nil
	}
	return err
}

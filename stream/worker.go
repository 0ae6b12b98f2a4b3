package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nuid"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// WorkerConfig configures a worker pool. The zero value of every field but
// Solver is usable.
type WorkerConfig struct {
	// Solver solves the captchas. Required.
	Solver solver.Solver
	// Threads is how many tasks this process solves at once. Default 4.
	// A task's thread is free for the next task as soon as the service is
	// done with it; recording its outcome goes on beside, for up to
	// finishingPerThread × Threads tasks at once.
	Threads int
	// Policy decides retries, snoozes and dead letters.
	Policy retry.Policy
	// Topology must match the producers'. Workers find the stream and the
	// consumers an admin created (EnsureTopology) in Topology.Domain, and
	// never create or change them.
	Topology Topology
	// Name identifies this worker in the audit trail. Default host-pid-random.
	Name string
	// Logger receives one line per outcome and per problem. Default: discard.
	Logger *slog.Logger
	// ShutdownGrace is how long in-flight solves may go on after the context
	// passed to Run ends; what is still running then is handed back without
	// spending an attempt. Default 30s.
	ShutdownGrace time.Duration
	// TokenLifetimes is how long a solution stays usable, by method; the
	// token leaves the token stream then. Default: DefaultTokenLifetimes.
	TokenLifetimes map[string]time.Duration
	// DefaultDeadline applies to tasks that carry none (raw publishers):
	// publish time plus this. Default 10m.
	DefaultDeadline time.Duration
	// IdleCheck is how often an idle worker looks for retries that came due;
	// new tasks wake it at once. Default 1s.
	IdleCheck time.Duration
	// Now is the clock of what the worker records and decides on (see the
	// package documentation, "Clocks"). Default time.Now.
	Now func() time.Time
	// NoErase deletes a finished task's message instead of erasing it: on
	// a store without encryption at rest its page URL then stays in the
	// store's files until the server compacts the block (the last block
	// never is). For such stores whose page URLs are not sensitive, such as
	// a QA suite against its own shop: nats-server erases a message by
	// rewriting its whole block file, which bounds the broker-bound rate
	// (bench/FINDINGS.md, "Erasure"). On an encrypted store (the default)
	// an erasure is a delete already. Default: erase.
	NoErase bool
	// Observer receives every step of every task, for metrics. Default: none.
	Observer Observer
}

// validate reports the first field of cfg that is out of range, by name.
// Zero fields take their defaults; nothing else is replaced.
func (cfg WorkerConfig) validate() error {
	switch {
	case cfg.Solver == nil:
		return errors.New("worker: no Solver")
	case cfg.Threads < 0:
		return fmt.Errorf("worker: Threads %d: want 0 (default 4) or more", cfg.Threads)
	case cfg.ShutdownGrace < 0:
		return fmt.Errorf("worker: ShutdownGrace %s: want 0 (default 30s) or more", cfg.ShutdownGrace)
	case cfg.DefaultDeadline < 0:
		return fmt.Errorf("worker: DefaultDeadline %s: want 0 (default %s) or more", cfg.DefaultDeadline, DefaultDeadline)
	case cfg.IdleCheck < 0:
		return fmt.Errorf("worker: IdleCheck %s: want 0 (default 1s) or more", cfg.IdleCheck)
	}
	for method, d := range cfg.TokenLifetimes {
		if d <= 0 {
			return fmt.Errorf("worker: TokenLifetimes[%q] %s: want a positive duration", method, d)
		}
	}
	if err := cfg.Policy.Validate(); err != nil {
		return fmt.Errorf("worker: %w", err)
	}
	return nil
}

// DefaultTokenLifetimes are the token lifetimes by method: reCAPTCHA 120 s,
// Turnstile 300 s, GeeTest (v3 and v4) 120 s, hCaptcha 120 s; a
// cloudflare_challenge cookie 300 s (the site sets its real lifetime, often
// longer; the outcome need not outlive the first use); text answers of
// images and BLS cells 300 s.
var DefaultTokenLifetimes = map[string]time.Duration{
	"userrecaptcha":        120 * time.Second,
	"turnstile":            300 * time.Second,
	"geetest":              120 * time.Second,
	"hcaptcha":             120 * time.Second,
	"cloudflare_challenge": 300 * time.Second,
	"post":                 300 * time.Second,
	"base64":               300 * time.Second,
	"bls":                  300 * time.Second,
}

// FatalError stops a worker: the service refused the worker itself (wrong
// key, banned IP). Queued tasks stay untouched for a worker that can work.
type FatalError struct {
	Code string
}

func (e *FatalError) Error() string {
	return fmt.Sprintf("the solving service refuses this worker (%s): stopped taking tasks; queued tasks are untouched", e.Code)
}

// Worker pulls tasks, one per free thread, and solves them.
type Worker struct {
	cfg   WorkerConfig
	top   Topology
	nc    *nats.Conn
	js    jetstream.JetStream
	s     jetstream.Stream
	feeds []*feed
	log   *slog.Logger
	fatal chan error
	turn  int // rotates the lane looked at first, so lanes share fairly
	plan  *planGate
	// eraser erases finished task messages.
	eraser *eraser
	// workQueue says the stream has WorkQueue retention: an ack removes
	// the task message.
	workQueue bool
	// wake tells an idle dispatch loop to look for tasks now.
	wake chan struct{}
	// ackWait is the shortest ack wait of the workers' consumers.
	ackWait time.Duration
	// tokens is the token stream (token.go).
	tokens jetstream.Stream
	// stopped is the refusal that stops the worker, once the service refused it.
	stopped atomic.Pointer[FatalError]
	// room keeps attempts from starting that a full stream could not record.
	room *workerRoom
	// busy counts the tasks being handled, for the heartbeat.
	busy atomic.Int32
	// held are the task generations whose attempt this worker recorded and
	// has not ended, for the heartbeat; inHand every task message being
	// handled.
	held, inHand heldTasks
	// abandon ends when the worker is stopping with the broker out of
	// reach: writes still to make for a task give up then (Run).
	abandon context.Context
	// clock reads the broker's clock (brokerTime).
	clock brokerClock
	// reach says whether the stream answers this worker (reach.go).
	reach reach
}

// storeEncrypted reports whether the server running the broker says its
// store is encrypted at rest, as it last said (the reading the room check
// keeps fresh); false when it says nothing.
func (w *Worker) storeEncrypted() bool {
	st, ok := w.room.store.read(context.Background(), w.nc)
	return ok && st.Encrypted
}

// stopWith notes why the worker stops: tasks handed back from now on say so.
func (w *Worker) stopWith(f *FatalError) { w.stopped.CompareAndSwap(nil, f) }

// stopCause is the refusal that stops the worker, nil when there is none.
func (w *Worker) stopCause() *FatalError { return w.stopped.Load() }

// NewWorker binds a worker pool to the CAPTCHA stream and its consumers on
// nc, in cfg.Topology.Domain. It creates nothing: without them it fails
// with ErrNoTopology, naming the domain it reached.
func NewWorker(ctx context.Context, nc *nats.Conn, cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Threads == 0 {
		cfg.Threads = 4
	}
	if cfg.Name == "" {
		host, _ := os.Hostname()
		cfg.Name = fmt.Sprintf("%s-%d-%s", host, os.Getpid(), nuid.Next()[16:])
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.ShutdownGrace <= 0 {
		cfg.ShutdownGrace = 30 * time.Second
	}
	if cfg.TokenLifetimes == nil {
		cfg.TokenLifetimes = DefaultTokenLifetimes
	}
	if cfg.DefaultDeadline <= 0 {
		cfg.DefaultDeadline = DefaultDeadline
	}
	if cfg.IdleCheck <= 0 {
		cfg.IdleCheck = time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Observer == nil {
		cfg.Observer = nopObserver{}
	}
	cfg.Policy = cfg.Policy.WithDefaults()
	js, err := JetStream(nc, cfg.Topology.Domain, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, fmt.Errorf("jetstream: %w", err)
	}
	top := cfg.Topology.withDefaults()
	s, tokens, err := openTopology(ctx, js, top)
	if err != nil {
		return nil, err
	}
	w := &Worker{cfg: cfg, top: top, nc: nc, js: js, s: s, tokens: tokens, fatal: make(chan error, 1), wake: make(chan struct{}, 1),
		log: cfg.Logger.With(slog.String("worker", cfg.Name)), plan: &planGate{js: js},
		room: &workerRoom{s: s, nc: nc, maxBytes: s.CachedInfo().Config.MaxBytes}}
	// A worker that has just reached the stream knows nothing of how long
	// it has answered: a link that came back a moment ago (this worker
	// waited for the queue meanwhile, or was restarted then) has every
	// worker cut off with it still without a heartbeat. It treats its
	// start as the stream's return (reach.settled).
	w.reach.backAt = time.Now()
	w.eraser = newEraser(s, w.log)
	w.eraser.plain = cfg.NoErase
	w.workQueue = s.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy
	if advice := LimitsRetentionAdvice(s); advice != "" {
		w.log.Warn(advice)
	}
	for _, wc := range workerConsumers() {
		c, err := untilAnswered(ctx, lookupTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
			return s.Consumer(ctx, consumerName(wc.lane, wc.priority))
		})
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, missingTopology(ctx, js, top, "consumer "+consumerName(wc.lane, wc.priority))
		}
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", consumerName(wc.lane, wc.priority), err)
		}
		// Heartbeats follow the consumers' real ack wait, which whoever
		// created them chose, not this worker's configuration.
		if aw := c.CachedInfo().Config.AckWait; aw > 0 && (w.ackWait == 0 || aw < w.ackWait) {
			w.ackWait = aw
		}
		f := &feed{cons: c, lane: wc.lane, priority: wc.priority}
		if mp := c.CachedInfo().Config.MaxAckPending; mp > 0 && mp < top.MaxInFlight {
			f.limited = true // a lane limit: the lane may well be at it
		}
		f.news.Store(1) // unknown: look once
		w.feeds = append(w.feeds, f)
	}
	if _, err := s.GetLastMsgForSubject(ctx, SubjectAnchor); errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Warn("the stream has no anchor (purged, or dropped by a server restart past the retention): " +
			"dispatch slows down with a deep backlog; run `captchaq init` to put it back")
	}
	return w, nil
}

// Name is the worker's name in the audit trail.
func (w *Worker) Name() string { return w.cfg.Name }

// Run pulls and solves tasks until ctx ends, then stops pulling, lets
// in-flight solves finish within ShutdownGrace, hands back the rest without
// spending an attempt, and returns nil. It returns a *FatalError when the
// service refuses the worker itself.
func (w *Worker) Run(ctx context.Context) error {
	// hard outlives ctx by the grace period: in-flight solves run under it.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	erasing, stopErasing := context.WithCancel(context.WithoutCancel(ctx))
	erased := make(chan struct{})
	go func() { defer close(erased); w.eraser.run(erasing) }()
	defer func() { stopErasing(); <-erased }()
	pullCtx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	// abandon ends once the worker is stopping and the broker is out of
	// reach: nothing it still has to write can be written then, so nothing
	// waits for it.
	abandon, abandonNow := context.WithCancel(context.Background())
	defer abandonNow()
	w.abandon = abandon

	// Idle threads wake on the headers the stream republishes of each task
	// it stored (captcha.stored.tasks.<lane>.<priority>.<id>), one
	// subscription per consumer: no page URL reaches a worker that does
	// not take the task, and the news comes once the task is stored. A
	// publish on a task subject the stream does not store has no listener
	// at all, and its publisher learns at once (no responders).
	for _, wc := range workerConsumers() {
		sub, err := w.nc.Subscribe(storedSubject(taskFilter(wc.lane, wc.priority)), func(m *nats.Msg) {
			w.news(SubjectRoot + strings.TrimPrefix(m.Subject, subjectStored))
			w.poke()
		})
		if err != nil {
			return fmt.Errorf("subscribe to new tasks: %w", err)
		}
		defer func() { _ = sub.Unsubscribe() }()
	}

	free := make(chan struct{}, w.cfg.Threads)
	for range w.cfg.Threads {
		free <- struct{}{}
	}
	finishing := make(chan struct{}, finishingPerThread*w.cfg.Threads)
	var inflight sync.WaitGroup
	var fatalErr error
	idle := time.NewTicker(w.cfg.IdleCheck)
	defer idle.Stop()
	// Heartbeats for `captchaq workers ls`, until the worker stops pulling.
	announced := w.announce(pullCtx, func() int { return int(w.busy.Load()) })
	defer func() { stopPulling(); announced() }()
	// Owners' cancels, relayed to the tasks' records while the worker runs.
	relayed, err := w.relayCancels(pullCtx)
	if err != nil {
		return fmt.Errorf("listen for cancels: %w", err)
	}
	defer func() { stopPulling(); relayed() }()

pull:
	for {
		select {
		case <-pullCtx.Done():
			break pull
		case fatalErr = <-w.fatal:
			break pull
		case <-free:
		}
		select {
		case fatalErr = <-w.fatal:
			break pull // the service refused us meanwhile: not one more task
		default:
		}
		select {
		case <-idle.C:
			// A worker kept busy by one lane still looks at the others
			// (retries and redeliveries come due without a publish).
			w.bumpAll()
		default:
		}
		n := 1
	more:
		for n < w.cfg.Threads {
			select {
			case <-free:
				n++
			default:
				break more
			}
		}
		if !w.anyNews() {
			// Nothing can be waiting: take no plan thread just to find that out.
			for range n {
				free <- struct{}{}
			}
		} else {
			// A plan thread first (when a plan-wide quota is set), then a task for it.
			threads, err := w.plan.acquire(pullCtx, n, w.cfg.IdleCheck, w.cfg.Now())
			if err != nil && pullCtx.Err() == nil {
				w.log.Warn("take a plan thread", slog.Any("error", err))
			}
			for range n - len(threads) {
				free <- struct{}{}
			}
			if len(threads) == 0 {
				if err != nil {
					w.pause(pullCtx, w.cfg.IdleCheck)
				}
				continue // the quota is in use: acquire waited for a thread already
			}
			select {
			case fatalErr = <-w.fatal:
				// Refused while we waited for a plan thread: not one more task.
				for _, t := range threads {
					t.release()
					free <- struct{}{}
				}
				break pull
			default:
			}
			msgs := w.fetch(pullCtx, len(threads))
			for i, m := range msgs {
				inflight.Add(1)
				sl := &slot{free: free, finishing: finishing}
				w.busy.Add(1)
				held := heldOf(m)
				w.inHand.add(held)
				go func() {
					defer inflight.Done()
					defer w.inHand.remove(held)
					defer w.busy.Add(-1)
					defer sl.end()
					defer threads[i].release()
					defer w.laneFreed(laneOfSubject(m.Subject()))
					defer w.survive(m)
					w.execute(hard, m, threads[i], sl)
				}()
			}
			for _, t := range threads[len(msgs):] {
				t.release()
				free <- struct{}{}
			}
			if len(msgs) > 0 {
				continue
			}
		}
		select {
		case <-pullCtx.Done():
			break pull
		case fatalErr = <-w.fatal:
			break pull
		case <-w.wake:
		case <-idle.C:
			// Retries and redeliveries come due without a publish.
			w.bumpAll()
		}
	}

	done := make(chan struct{})
	go func() { inflight.Wait(); close(done) }()
	var unreturned []HeldTask
	go func() {
		// The tasks in hand when the broker went: none of them can be
		// handed back (or its solve recorded) until it is back.
		ch := w.nc.StatusChanged(nats.DISCONNECTED, nats.RECONNECTING, nats.CLOSED)
		defer w.nc.RemoveStatusListener(ch)
		if w.nc.IsConnected() {
			select {
			case <-ch:
			case <-done:
				return
			}
		}
		unreturned = w.inHand.list()
		abandonNow()
	}()
	if fatalErr != nil {
		cancelHard() // the service refuses us: every solve would fail alike
	}
	select {
	case <-done:
	case <-abandon.Done():
		cancelHard()
		<-done
	case <-time.After(w.cfg.ShutdownGrace):
		w.log.Warn("shutdown grace over: handing back in-flight tasks")
		cancelHard()
		<-done
	}
	if abandon.Err() != nil {
		ids := make([]string, len(unreturned))
		for i, t := range unreturned {
			ids[i] = t.ID
		}
		if len(ids) > 0 {
			w.log.Warn("stopping with the broker out of reach: could not hand back the tasks in hand; "+
				"each comes back to a worker once the broker is back and its ack wait has passed",
				slog.Int("tasks", len(ids)), slog.Any("ids", ids))
		}
		abandonNow()
		return fatalErr
	}
	abandonNow()
	if fatalErr == nil {
		select {
		case fatalErr = <-w.fatal:
		default:
		}
	}
	// Finished task messages still to erase get a moment; what is left
	// then keeps its bytes on disk until the server compacts its block.
	if idle, n := w.eraser.drained(); n > 0 {
		select {
		case <-idle:
		case <-time.After(eraseGrace):
			if _, n := w.eraser.drained(); n > 0 {
				w.log.Warn("stopping with messages not yet erased: their bytes stay on disk until the server compacts their blocks",
					slog.Int("messages", n))
			}
		}
	}
	// Hand-backs (Nak) are not confirmed by the server: make sure they left
	// before the caller closes the connection, so handed-back tasks come
	// back at once rather than after the ack wait.
	_ = w.nc.FlushTimeout(5 * time.Second)
	return fatalErr
}

// heldOf names the task generation of a delivered task message.
func heldOf(m jetstream.Msg) HeldTask {
	t := HeldTask{ID: idFromSubject(m.Subject())}
	if md, err := m.Metadata(); err == nil {
		t.Gen = md.Sequence.Stream
	}
	return t
}

// survive keeps a bug met on one message from taking the whole worker down:
// it logs the panic with its stack and lets the task come back after a while.
func (w *Worker) survive(m jetstream.Msg) {
	if r := recover(); r != nil {
		w.log.Error("panic while handling a task; it will be delivered again", slog.Any("panic", r),
			slog.String("subject", m.Subject()), slog.String("stack", string(debug.Stack())))
		_ = m.NakWithDelay(w.top.AckWait)
	}
}

// pause waits for d or until ctx ends.
func (w *Worker) pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

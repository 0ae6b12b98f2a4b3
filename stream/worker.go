package stream

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/completer"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/executor"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// Worker pulls tasks, one per free thread, and solves them.
type Worker struct {
	cfg   WorkerConfig
	top   Topology
	nc    *nats.Conn
	js    jetstream.JetStream
	s     jetstream.Stream
	log   *slog.Logger
	fatal chan error
	// built is the solving client NewSolver built (nil: Solver given);
	// learner is the client whose learning the worker shares (nil: none).
	built   *solver.Client
	learner Learner
	// dispatch takes tasks for the free threads; exec executes one
	// delivery; completer acks and erases finished task messages.
	dispatch  *dispatcher.Dispatcher
	exec      *executor.Executor
	completer *completer.Completer
	// ackWait is the shortest ack wait of the workers' consumers.
	ackWait time.Duration
	// tokens is the token stream.
	tokens jetstream.Stream
	// stopped is the refusal that stops the worker, once the service refused it.
	stopped atomic.Pointer[FatalError]
	// room keeps attempts from starting that a full stream could not record.
	room *room.Worker
	// busy counts the tasks being handled, for the heartbeat.
	busy atomic.Int32
	// held are the task generations whose attempt this worker recorded and
	// has not ended, for the heartbeat; inHand every task message being
	// handled.
	held, inHand executor.Held
	// abandon ends when the worker is stopping with the broker out of
	// reach: writes still to make for a task give up then (Run).
	abandon context.Context
	// clock reads the broker's clock (brokerTime).
	clock jscall.BrokerClock
	// reach says whether the stream answers this worker.
	reach jscall.Reach
	// waitingRoom is the waiting room's consumer (nil: the stream has none
	// yet, and a task that is not due waits on its lane's consumer).
	waitingRoom jetstream.Consumer
}

// storeEncrypted reports whether the server running the broker says its
// store is encrypted at rest, as it last said (the reading the room check
// keeps fresh); false when it says nothing.
func (w *Worker) storeEncrypted() bool {
	st, ok := w.room.Store(context.Background())
	return ok && st.Encrypted
}

// NewWorker binds a worker pool to the CAPTCHA stream and its consumers on
// nc, in cfg.Topology.Domain. It creates nothing: without them it fails
// with ErrNoTopology, naming the domain it reached.
func NewWorker(ctx context.Context, nc *nats.Conn, cfg WorkerConfig) (*Worker, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	js, err := jetStreamOf(nc, cfg.Topology, jetstream.WithPublishAsyncTimeout(10*time.Second))
	if err != nil {
		return nil, err
	}
	top := cfg.Topology.withDefaults()
	sent := cfg.Now()
	s, tokens, err := topology.Open(ctx, js, top.spec())
	if err != nil {
		return nil, err
	}
	built, learner, err := cfg.solver(ctx)
	if err != nil {
		return nil, err
	}
	if built != nil {
		cfg.Solver = built
		if cfg.WrapSolver != nil {
			if cfg.Solver = cfg.WrapSolver(built); cfg.Solver == nil {
				return nil, errors.New("worker: WrapSolver returned no solver")
			}
		}
	}
	w := &Worker{cfg: cfg, built: built, learner: learner, top: top, nc: nc, js: js, s: s, tokens: tokens, fatal: make(chan error, 1),
		log:  cfg.Logger.With(slog.String("worker", cfg.Name)),
		room: room.NewWorker(s, nc, s.CachedInfo().Config.MaxBytes)}
	w.clock.Local = cfg.Now
	// The stream's info carries the broker's clock when it answered: the
	// worker's reading of it until its first heartbeat's, so that the plan
	// window it shares before its first task is stamped on the broker's
	// clock (upkeep.Learning.Clock).
	if at := s.CachedInfo().TimeStamp; !at.IsZero() {
		w.clock.Set(jscall.ClockOffset(at, sent, cfg.Now()))
	}
	w.reach.Started()
	w.dispatch = dispatcher.New(nil)
	w.dispatch.Threads, w.dispatch.IdleCheck, w.dispatch.Now = cfg.Threads, cfg.IdleCheck, cfg.Now
	w.dispatch.Plan, w.dispatch.Reach, w.dispatch.Log = &dispatcher.PlanGate{JS: js}, &w.reach, w.log
	w.dispatch.Listen = w.wakeUps
	if r, ok := learner.(dispatcher.WindowRoom); ok && learner.PlanWindow() > 0 {
		w.dispatch.Room = r
	}
	w.completer = completer.New(s, w.log, cfg.NoErase, w.storeEncrypted)
	w.completer.Acked = func(m jetstream.Msg) { w.dispatch.LaneAcked(wire.LaneOfSubject(m.Subject())) }
	w.exec = w.executor(js, s, tokens)
	if advice := topology.LimitsRetentionAdvice(s); advice != "" {
		w.log.Warn(advice)
	}
	for _, wc := range topology.WorkerConsumers() {
		c, err := jscall.UntilAnswered(ctx, topology.LookupTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
			return s.Consumer(ctx, topology.ConsumerName(wc.Lane, wc.Priority))
		})
		if errors.Is(err, jetstream.ErrConsumerNotFound) {
			return nil, topology.Missing(ctx, js, top.Domain, "consumer "+topology.ConsumerName(wc.Lane, wc.Priority))
		}
		if err != nil {
			return nil, fmt.Errorf("consumer %s: %w", topology.ConsumerName(wc.Lane, wc.Priority), err)
		}
		// Heartbeats follow the consumers' real ack wait, which whoever
		// created them chose, not this worker's configuration.
		if aw := c.CachedInfo().Config.AckWait; aw > 0 && (w.ackWait == 0 || aw < w.ackWait) {
			w.ackWait = aw
		}
		f := &dispatcher.Feed{Cons: c, Lane: wc.Lane, Priority: wc.Priority}
		if mp := c.CachedInfo().Config.MaxAckPending; mp > 0 && mp < top.MaxInFlight {
			f.Limited = true // a lane limit: the lane may well be at it
		}
		f.News.Store(1) // unknown: look once
		w.dispatch.Feeds = append(w.dispatch.Feeds, f)
	}
	room, err := jscall.UntilAnswered(ctx, topology.LookupTimeout, func(ctx context.Context) (jetstream.Consumer, error) {
		return s.Consumer(ctx, wire.WaitingRoomConsumer)
	})
	switch {
	case err == nil:
		w.waitingRoom = room
		w.exec.Mover = w.exec.Store.(*taskstore.JetStream)
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		w.log.Warn("the stream has no waiting room (made by an earlier version): tasks waiting for their use_at or not_before " +
			"count towards their lane's limit; run `captchaq init` to add it")
	default:
		return nil, fmt.Errorf("consumer %s: %w", wire.WaitingRoomConsumer, err)
	}
	if _, err := s.GetLastMsgForSubject(ctx, wire.SubjectAnchor); errors.Is(err, jetstream.ErrMsgNotFound) {
		w.log.Warn("the stream has no anchor (purged, or dropped by a server restart past the retention): " +
			"dispatch slows down with a deep backlog; run `captchaq init` to put it back")
	}
	return w, nil
}

// Name is the worker's name in the audit trail.
func (w *Worker) Name() string { return w.cfg.Name }

// executor is the executor of the worker's deliveries, on the stream s
// and the token stream tokens.
func (w *Worker) executor(js jetstream.JetStream, s, tokens jetstream.Stream) *executor.Executor {
	cfg := w.cfg
	return &executor.Executor{
		Hooks: execHooks{w},
		Name:  cfg.Name, Policy: cfg.Policy, Solver: cfg.Solver, TokenLifetimes: cfg.TokenLifetimes,
		DefaultDeadline: cfg.DefaultDeadline, AckWait: w.top.AckWait, Log: w.log,
		Store:         &taskstore.JetStream{JS: js, Stream: s, Tokens: tokens, NC: w.nc, Domain: w.top.Domain},
		Completer:     w.completer,
		Room:          w.room,
		Forged:        &executor.ForgedBudget{},
		Held:          &w.held,
		Clock:         &w.clock,
		Reach:         &w.reach,
		ScheduleCheck: cfg.ScheduleCheck,
		Retention:     s.CachedInfo().Config.MaxAge,
		FreeHeld:      solvesElsewhere(cfg.Solver),
	}
}

// solvesElsewhere reports whether s sends a task to another service while
// one holds a captcha (a provider.Set of several providers).
func solvesElsewhere(s solver.Solver) bool {
	e, ok := s.(interface{ SolvesElsewhere() bool })
	return ok && e.SolvesElsewhere()
}

// execHooks is what the worker's executor asks of the worker
// (executor.Hooks).
type execHooks struct{ w *Worker }

func (h execHooks) Now() time.Time       { return h.w.cfg.Now() }
func (h execHooks) Lease() time.Duration { return h.w.heartbeat() }

func (h execHooks) Observe(ev Event, t Task) {
	h.w.cfg.Observer.Observe(Observation{Kind: ev.Kind, Method: t.Method, Lane: LaneOf(t.Method, t.Params),
		Code: ev.Code, Reason: ev.Reason, Duration: time.Duration(ev.Seconds * float64(time.Second)),
		Delay: time.Duration(ev.DelayMS) * time.Millisecond})
}

func (h execHooks) EarlyRelease(ctx context.Context, t executor.Thread) context.Context {
	th, _ := t.(*dispatcher.PlanThread)
	return h.w.dispatch.Plan.EarlyRelease(ctx, th)
}

func (h execHooks) LookAgainAfter(d time.Duration, lane wire.Lane) {
	h.w.dispatch.LookAgainAfter(d, lane)
}

func (h execHooks) StopWith(code string) { h.w.stopped.CompareAndSwap(nil, &FatalError{Code: code}) }

func (h execHooks) StopCause() string {
	if f := h.w.stopped.Load(); f != nil {
		return f.Code
	}
	return ""
}

func (h execHooks) Refused(code string) {
	select {
	case h.w.fatal <- &FatalError{Code: code}:
	default:
	}
}

func (h execHooks) Abandon() context.Context { return h.w.abandonCtx() }

func (h execHooks) Lead(method string, params wire.Params) time.Duration {
	return h.w.solveLead(method, params)
}

// LeadQuantile is the quantile of a kind's solve time a worker starts a
// task with use_at that long before it. The 99th percentile of the
// log-normal the workers fit: a higher quantile than "nine in ten" because
// the fit, made of answers found between polls, underestimates the tail
// of services whose times are bounded (the 90th percentile of a fit to
// 15–60-s solves came out at 37–44 s); docs/time-to-token.md, "Tokens
// just in time", measures the share of tokens in time and the lifetime
// left with it.
const LeadQuantile = 0.99

// solveTimes is what a solving client knows of its kinds' solve times
// (a *solver.Client).
type solveTimes interface {
	SolveTime(kind string, q float64) (time.Duration, bool)
}

// solveLead is how long before a task's use_at its solve starts: the
// kind's solve time at LeadQuantile as the worker's client learned it
// (solver.Client.SolveTime), or, with a Solver that does not learn, four
// times the kind's default first poll (solver.DefaultFirstPoll).
func (w *Worker) solveLead(method string, params wire.Params) time.Duration {
	kind := solver.Kind(method, params)
	var st solveTimes
	if w.built != nil {
		st = w.built
	} else if s, ok := w.cfg.Solver.(solveTimes); ok {
		st = s
	}
	if st == nil {
		return 4 * solver.DefaultFirstPoll(kind)
	}
	d, _ := st.SolveTime(kind, LeadQuantile)
	return d
}

// abandonCtx is the worker's abandon context (Run), or one that never ends
// outside Run.
func (w *Worker) abandonCtx() context.Context {
	if w.abandon == nil {
		return context.Background()
	}
	return w.abandon
}

// heartbeat is how often a held task's lease is renewed: a third of the
// shortest ack wait of the consumers involved.
func (w *Worker) heartbeat() time.Duration {
	aw := w.top.AckWait
	if w.ackWait > 0 {
		aw = w.ackWait
	}
	return aw / 3
}

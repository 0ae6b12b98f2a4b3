package stream

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/completer"
	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/upkeep"
	"github.com/captchaq/captchaq/stream/wire"
)

// Run pulls and solves tasks until ctx ends, then stops pulling, lets
// in-flight solves finish within ShutdownGrace, hands back the rest without
// spending an attempt, and returns nil. It returns a *FatalError when the
// service refuses the worker itself. Before the first task, every
// ShareTimingsEvery and once more as it returns, it shares what its
// solving client learned with the pool (WorkerConfig.Learner).
func (w *Worker) Run(ctx context.Context) error {
	// The worker's background services (upkeep), stopped in the reverse
	// order of their start as Run returns.
	var up upkeep.Group
	defer up.Stop()
	// What the solving client learns is shared with the pool until Run
	// returns, and once more then.
	if l := w.learning(); l != nil {
		w.dispatch.Plan.OnLifted(l.QuotaLifted)
		_ = up.Start(ctx, l) // it never fails: it logs what it cannot join
	}
	// hard outlives ctx by the grace period: in-flight solves run under it.
	hard, cancelHard := context.WithCancel(context.WithoutCancel(ctx))
	defer cancelHard()
	// Finished task messages are erased until Run returns, past ctx's end.
	_ = up.Start(context.WithoutCancel(ctx), upkeep.Loop(w.completer.Run))
	pullCtx, stopPulling := context.WithCancel(ctx)
	defer stopPulling()
	// abandon ends once the worker is stopping and the broker is out of
	// reach: nothing it still has to write can be written then, so nothing
	// waits for it.
	abandon, abandonNow := context.WithCancel(context.Background())
	defer abandonNow()
	w.abandon = abandon

	// Idle threads wake on the headers the stream republishes of each task
	// it stored (wakeUps), while they can tell the worker something.
	if err := w.dispatch.ListenAll(); err != nil {
		w.dispatch.QuietAll()
		return fmt.Errorf("subscribe to new tasks: %w", err)
	}
	defer w.dispatch.QuietAll()

	var inflight sync.WaitGroup
	// Heartbeats for `captchaq workers ls`, until the worker stops pulling.
	// A task that gave its thread back holds none: its captcha waits at a
	// per-solve provider (solver.WithDetach) or at a silent one, or it
	// records its outcome.
	_ = up.Start(pullCtx, w.heartbeatService(func() int { return int(w.busy.Load()) - w.dispatch.Away() }))
	// Owners' cancels, relayed to the tasks' records while the worker runs.
	if err := up.Start(pullCtx, w.cancelRelay()); err != nil {
		return fmt.Errorf("listen for cancels: %w", err)
	}
	// The waiting room's deliveries, beside the lanes', holding no thread.
	waitingRoom := w.waitingRoomService(hard, &inflight)
	if waitingRoom != nil {
		_ = up.Start(pullCtx, waitingRoom)
	}

	// Forged messages the dispatcher takes in bulk end beside the
	// threads, holding none (dispatcher.DrainBatch).
	w.dispatch.Drain = func(m jetstream.Msg) {
		inflight.Add(1)
		m = parsedOnce(m)
		go func() {
			defer inflight.Done()
			defer w.dispatch.LaneFreed(wire.LaneOfSubject(m.Subject()))
			defer w.survive(m)
			w.exec.Execute(hard, m, (*dispatcher.PlanThread)(nil), (*dispatcher.Slot)(nil))
		}()
	}
	// Replay- and moved-shaped copies the dispatcher takes in bulk are
	// judged on the task's records beside the threads, as many at once as
	// checkRoom holds (the dispatch loop waits for room: a flood of them
	// must not cost the worker a goroutine, a read and a body in memory
	// per copy): forged ones end there, genuine ones go back to be taken
	// by a thread (dispatcher.NeedsRecords).
	room := make(checkRoom, dispatcher.DrainBatch)
	w.dispatch.Check = func(m jetstream.Msg) {
		n, ok := room.take(hard, m)
		if !ok {
			return // it comes back after the ack wait, as the rest do
		}
		inflight.Add(1)
		m = parsedOnce(m)
		go func() {
			defer inflight.Done()
			defer room.give(n)
			defer w.survive(m)
			if w.exec.EndIfForged(hard, m, (*dispatcher.PlanThread)(nil), (*dispatcher.Slot)(nil)) {
				w.dispatch.LaneFreed(wire.LaneOfSubject(m.Subject()))
				return
			}
			w.dispatch.Verified(m)
			_ = m.Nak()
			w.dispatch.News(m.Subject())
			w.dispatch.Poke()
		}()
	}
	run := runners{idle: make(chan func())}
	fatalErr := w.dispatch.Pull(pullCtx, w.fatal, func(m jetstream.Msg, thread *dispatcher.PlanThread, sl *dispatcher.Slot) {
		inflight.Add(1)
		w.busy.Add(1)
		m = parsedOnce(m)
		held := heldOf(m)
		w.inHand.Add(held)
		run.start(func() {
			defer inflight.Done()
			defer w.inHand.Remove(held)
			defer w.busy.Add(-1)
			defer sl.End()
			defer thread.Release()
			defer w.dispatch.LaneFreed(wire.LaneOfSubject(m.Subject()))
			defer w.survive(m)
			w.exec.Execute(solver.WithPlanClaim(hard, sl.Claim()), m, thread, sl)
		})
	})
	run.stop() // Pull starts nothing more

	if waitingRoom != nil {
		waitingRoom.Stop() // it starts nothing more either
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
		unreturned = w.inHand.List()
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
	if idle, n := w.completer.Drained(); n > 0 {
		select {
		case <-idle:
		case <-time.After(completer.EraseGrace):
			if _, n := w.completer.Drained(); n > 0 {
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

// wakeUps subscribes to the headers the stream republishes of each task it
// stores on f's subjects (captcha.stored.tasks.<lane>.<priority>.<id>),
// calling woken for each: no page URL reaches a worker that does not take
// the task, and the news comes once the task is stored. A publish on a task
// subject the stream does not store has no listener at all, and its
// publisher learns at once (no responders). The dispatcher holds the
// subscription only while a wake-up can tell it something
// (dispatcher.Dispatcher.Listen).
func (w *Worker) wakeUps(f *dispatcher.Feed, woken func()) (func(), error) {
	sub, err := w.nc.Subscribe(wire.StoredSubject(wire.TaskFilter(f.Lane, f.Priority)), func(*nats.Msg) { woken() })
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// runners are the goroutines the worker's tasks run on, kept from one task
// to the next: a task's goroutine grows its stack to what executing a
// delivery takes, and a fresh goroutine per task paid that growth (a stack
// copy per doubling) for every task. A task never waits for a runner: with
// none idle, start makes one.
type runners struct {
	idle chan func() // unbuffered: a send goes only to a runner waiting for it
}

// start runs task on an idle runner, or on a new one.
func (r *runners) start(task func()) {
	select {
	case r.idle <- task:
	default:
		go r.loop(task)
	}
}

// loop runs task, then every task handed to it, until stop.
func (r *runners) loop(task func()) {
	for task != nil {
		task()
		task = <-r.idle
	}
}

// stop lets the runners end once their tasks have: call it when start is
// called no more.
func (r *runners) stop() { close(r.idle) }

// parsedMsg is a delivered task message whose metadata (the fields of its
// ack reply subject) was parsed once, for everyone on the worker who reads it.
type parsedMsg struct {
	jetstream.Msg
	md  *jetstream.MsgMetadata
	err error
}

func (m *parsedMsg) Metadata() (*jetstream.MsgMetadata, error) { return m.md, m.err }

// parsedOnce is m with its metadata parsed once.
func parsedOnce(m jetstream.Msg) jetstream.Msg {
	md, err := m.Metadata()
	return &parsedMsg{Msg: m, md: md, err: err}
}

// checkRoom is the room for moved and replay-shaped copies judged beside
// the threads (Dispatcher.Check): a token each, or, for a large one, its
// share of dispatcher.DrainBytes, so that at most DrainBatch small copies
// or DrainBytes of large ones are held at once. Only the dispatch loop
// takes room, so taking a copy's tokens one by one never deadlocks.
type checkRoom chan struct{}

// take waits until there is room for m, and returns the tokens it took;
// false if ctx ended first (none held).
func (r checkRoom) take(ctx context.Context, m jetstream.Msg) (int, bool) {
	n := min(cap(r), max(1, len(m.Data())*cap(r)/dispatcher.DrainBytes))
	for i := range n {
		select {
		case r <- struct{}{}:
		case <-ctx.Done():
			r.give(i)
			return 0, false
		}
	}
	return n, true
}

// give hands n tokens back.
func (r checkRoom) give(n int) {
	for range n {
		<-r
	}
}

// heldOf names the task generation of a delivered task message.
func heldOf(m jetstream.Msg) HeldTask {
	t := HeldTask{ID: wire.IDFromSubject(m.Subject())}
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

package stream

import (
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// announce stores the worker's heartbeat now and every wire.HeartbeatEvery until
// ctx ends, then a last one that says it stopped. inUse counts its busy
// threads. Heartbeats are best effort: a failed one is tried again at the
// next beat, and never holds up the worker. The returned function waits for
// the last heartbeat (at most two seconds).
func (w *Worker) announce(ctx context.Context, inUse func() int) func() {
	host, _ := os.Hostname()
	info := WorkerInfo{Name: w.cfg.Name, Host: host, PID: os.Getpid(), Threads: w.cfg.Threads, Started: w.cfg.Now()}
	beat := func(ctx context.Context) {
		info.At, info.InUse, info.Tasks = w.cfg.Now(), inUse(), w.held.List()
		info.ServiceDownSince, info.ServiceDown, info.HeldAtService = time.Time{}, "", 0
		if sc := w.serviceClient(); sc != nil {
			info.HeldAtService = sc.Held()
			if since, err := sc.Unreachable(); err != nil {
				info.ServiceDownSince, info.ServiceDown = since, err.Error()
			}
		}
		b, err := json.Marshal(info)
		if err != nil {
			return
		}
		msg := nats.NewMsg(wire.HeartbeatSubject(w.cfg.Name))
		msg.Data = b
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		sent := w.cfg.Now()
		ack, err := w.js.PublishMsg(bctx, msg, jetstream.WithMsgTTL(HeartbeatTTL))
		if err != nil {
			if ctx.Err() == nil {
				w.log.Debug("heartbeat not stored", slog.Any("error", err))
				w.reach.Failed(w.log, "store a heartbeat", err)
			}
			return
		}
		w.reach.Answered(w.log)
		acked := w.cfg.Now()
		if m, err := w.s.GetMsg(bctx, ack.Sequence); err == nil {
			w.clock.Set(jscall.ClockOffset(m.Time, sent, acked))
		}
	}
	// The first heartbeat before any task: it reads the broker's clock.
	beat(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(wire.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				info.Stopped = true
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastBeatTimeout)
				beat(sctx)
				cancel()
				return
			case <-t.C:
				beat(ctx)
			}
		}
	}()
	return func() { <-done }
}

// lastBeatTimeout bounds the heartbeat that says a worker stopped: with the
// broker gone it is not stored, and the stop must not wait for it.
const lastBeatTimeout = time.Second

// brokerTime is t, a time of the worker's clock, on the broker's clock.
func (w *Worker) brokerTime(t time.Time) time.Time {
	return w.clock.BrokerTime(t)
}

// serviceClient is the worker's *solver.Client, built or given, whose
// outage and held captchas its heartbeat carries; nil for another Solver.
func (w *Worker) serviceClient() *solver.Client {
	if w.built != nil {
		return w.built
	}
	sc, _ := w.cfg.Solver.(*solver.Client)
	return sc
}

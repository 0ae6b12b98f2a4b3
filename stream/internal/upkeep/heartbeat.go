package upkeep

import (
	"context"
	"encoding/json"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// Heartbeat stores the worker's heartbeat (wire.WorkerInfo) at Start and
// every wire.HeartbeatEvery until it stops, then a last one that says it
// stopped, for `captchaq workers ls`. Heartbeats are best effort: a failed
// one is tried again at the next beat, and never holds up the worker. Each
// stored heartbeat also reads the broker's clock (Clock).
type Heartbeat struct {
	// Info is the worker's heartbeat with what does not change: its name,
	// host, pid, threads and start.
	Info wire.WorkerInfo
	// Now is the worker's clock.
	Now func() time.Time
	// InUse counts the worker's busy threads; Held lists the task
	// generations it holds (executor.Held).
	InUse func() int
	Held  func() []wire.HeldTask
	// Service is the worker's client of the solving service, whose outage
	// and captchas held the heartbeat carries; nil: none to report.
	Service ServiceState
	// JS publishes on the stream, Stream reads the heartbeat back for the
	// broker's time of it.
	JS     jetstream.JetStream
	Stream jetstream.Stream
	// Reach hears whether the stream answers; Clock is set from each
	// heartbeat's stored time.
	Reach *jscall.Reach
	Clock *jscall.BrokerClock
	Log   *slog.Logger

	r runner
}

// ServiceState is what a heartbeat says of the solving service
// (solver.Client).
type ServiceState interface {
	Held() int
	Unreachable() (time.Time, error)
}

// lastBeatTimeout bounds the heartbeat that says a worker stopped: with the
// broker gone it is not stored, and the stop must not wait for it.
const lastBeatTimeout = time.Second

// Start stores the first heartbeat, before any task (it reads the broker's
// clock), and beats until ctx ends or Stop.
func (h *Heartbeat) Start(ctx context.Context) error {
	info := h.Info
	h.beat(ctx, &info)
	h.r.run(ctx, func(ctx context.Context) {
		t := time.NewTicker(wire.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				info.Stopped = true
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastBeatTimeout)
				h.beat(sctx, &info)
				cancel()
				return
			case <-t.C:
				h.beat(ctx, &info)
			}
		}
	})
	return nil
}

// Stop stores the last heartbeat (waiting for it at most a second) and
// returns.
func (h *Heartbeat) Stop() { h.r.stop() }

// beat stores one heartbeat of info, brought up to now.
func (h *Heartbeat) beat(ctx context.Context, info *wire.WorkerInfo) {
	info.At, info.InUse, info.Tasks = h.Now(), h.InUse(), h.Held()
	info.ServiceDownSince, info.ServiceDown, info.HeldAtService = time.Time{}, "", 0
	if sc := h.Service; sc != nil {
		info.HeldAtService = sc.Held()
		if since, err := sc.Unreachable(); err != nil {
			info.ServiceDownSince, info.ServiceDown = since, err.Error()
		}
	}
	b, err := json.Marshal(info)
	if err != nil {
		return
	}
	msg := nats.NewMsg(wire.HeartbeatSubject(info.Name))
	msg.Data = b
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	sent := h.Now()
	ack, err := h.JS.PublishMsg(bctx, msg, jetstream.WithMsgTTL(wire.HeartbeatTTL))
	if err != nil {
		if ctx.Err() == nil {
			h.Log.Debug("heartbeat not stored", slog.Any("error", err))
			h.Reach.Failed(h.Log, "store a heartbeat", err)
		}
		return
	}
	h.Reach.Answered(h.Log)
	acked := h.Now()
	if m, err := h.Stream.GetMsg(bctx, ack.Sequence); err == nil {
		h.Clock.Set(jscall.ClockOffset(m.Time, sent, acked))
	}
}

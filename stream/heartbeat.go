package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
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
		info.At, info.InUse, info.Tasks = w.cfg.Now(), inUse(), w.held.list()
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
				w.reach.failed(w.log, "store a heartbeat", err)
			}
			return
		}
		w.reach.answered(w.log)
		acked := w.cfg.Now()
		if m, err := w.s.GetMsg(bctx, ack.Sequence); err == nil {
			w.clock.set(clockOffset(m.Time, sent, acked))
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

// brokerClock is a worker's reading of the broker's clock: how far it is
// ahead of WorkerConfig.Now (negative: behind), from the stamps the broker
// put on the worker's heartbeats. Token expiry is on the broker's clock, the
// one clock every producer and worker shares (token.go).
type brokerClock struct{ offset atomic.Int64 }

func (c *brokerClock) set(d time.Duration) { c.offset.Store(int64(d)) }

// clockOffset is the broker's clock less the worker's, from the stamp at
// the broker put on a heartbeat sent at sent and acknowledged at acked (the
// worker's clock): any offset in [at-acked, at-sent] fits what was seen,
// and the one nearest zero is taken, so clocks that agree read as agreeing
// whatever the round trip took.
func clockOffset(at, sent, acked time.Time) time.Duration {
	lo, hi := at.Sub(acked), at.Sub(sent)
	switch {
	case lo > 0:
		return lo
	case hi < 0:
		return hi
	}
	return 0
}

// brokerTime is t, a time of the worker's clock, on the broker's clock.
func (w *Worker) brokerTime(t time.Time) time.Time {
	return t.Add(time.Duration(w.clock.offset.Load()))
}

// heldTasks is the set of task generations a worker holds, for its
// heartbeats: another worker given one of them again (a redelivery after a
// broker restart) sees the holder is alive and waits (execute.go).
type heldTasks struct {
	mu sync.Mutex
	m  map[HeldTask]int
}

func (h *heldTasks) add(t HeldTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m == nil {
		h.m = map[HeldTask]int{}
	}
	h.m[t]++
}

func (h *heldTasks) remove(t HeldTask) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.m[t]--; h.m[t] <= 0 {
		delete(h.m, t)
	}
}

func (h *heldTasks) has(t HeldTask) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.m[t] > 0
}

func (h *heldTasks) list() []HeldTask {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]HeldTask, 0, len(h.m))
	for t := range h.m {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b HeldTask) int { return cmp.Or(strings.Compare(a.ID, b.ID), cmp.Compare(a.Gen, b.Gen)) })
	return out
}

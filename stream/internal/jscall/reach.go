package jscall

import (
	"log/slog"
	"sync"
	"time"
)

// Reach is a worker's view of whether the stream answers it. A link to the
// hub that is cut (a leaf site's) or a broker that is down shows as
// heartbeats and fetches that fail; the worker says so once when the
// stream stops answering and once when it answers again, instead of once
// per fetch and consumer.
//
// It also tells the executor how long ago the stream came back: the
// heartbeats of every worker cut off with this one expired meanwhile, and
// each stores its next one within wire.HeartbeatEvery of the link's return. A
// missing heartbeat means a dead worker only once that has had time to
// happen.
type Reach struct {
	mu     sync.Mutex
	down   bool
	downAt time.Time
	backAt time.Time // zero: never seen out of reach
}

// Failed notes that a request to the stream failed, and logs it when the
// stream was answering until now.
func (r *Reach) Failed(log *slog.Logger, what string, err error) {
	r.mu.Lock()
	first := !r.down
	if first {
		r.down, r.downAt = true, time.Now()
	}
	r.mu.Unlock()
	if first {
		log.Warn("the stream does not answer: no task is fetched and no heartbeat stored until it does; said once, and again when it answers",
			slog.String("failed", what), slog.Any("error", err))
	}
}

// Answered notes that a request to the stream made the round trip (the
// broker's own reply came back: a stored message's ack, a fetched
// message), and logs the outage that it ends, if any. A call that only
// ended without an error proves nothing: a no-wait fetch the broker never
// answers ends so, and a publish without an ack leaves only the client's
// buffer; neither may be told here.
func (r *Reach) Answered(log *slog.Logger) {
	r.mu.Lock()
	if !r.down {
		r.mu.Unlock()
		return
	}
	r.down, r.backAt = false, time.Now()
	lasted := r.backAt.Sub(r.downAt)
	r.mu.Unlock()
	log.Warn("the stream answers again", slog.Duration("out_of_reach_for", lasted.Round(time.Millisecond)))
}

// Settled reports whether the stream has answered for at least d since it
// last came back, or since the worker started (Started).
func (r *Reach) Settled(d time.Duration) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.down && (r.backAt.IsZero() || time.Since(r.backAt) >= d)
}

// Started notes that the worker has just reached the stream. It knows
// nothing of how long the stream has answered: a link that came back a
// moment ago (the worker waited for the queue meanwhile, or was restarted
// then) has every worker cut off with it still without a heartbeat, so the
// worker's start counts as the stream's return (Settled).
func (r *Reach) Started() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.backAt = time.Now()
}

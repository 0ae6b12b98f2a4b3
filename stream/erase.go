package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Tokens and page URLs leave the store's files, not only the stream.
// JetStream's delete and its TTL and MaxAge expiry only mark a message
// removed: the bytes stay in the block file until the block is compacted,
// and the last block never is. So what must not outlive its time is erased
// (SecureDeleteMsg overwrites the message in place):
//
//   - a finished task's message (it holds the page URL): by the worker
//     that stored its outcome, at once (Worker.done);
//   - a solved outcome (it holds the token): by the worker that stored it,
//     when the token expires; if that worker stops first, by the token
//     eraser that `captchaq server` runs (RunTokenEraser), within
//     eraseSweepEvery of the expiry. The outcome's TTL ends eraseMargin
//     after the expiry: it is the backstop when nobody erases, and then the
//     bytes stay until compaction.
const (
	// eraseMargin is how long after a token's expiry its outcome's TTL ends.
	eraseMargin = 30 * time.Second
	// eraseSweepEvery is how often RunTokenEraser looks for expired tokens.
	eraseSweepEvery = 10 * time.Second
	// eraseMaxLag is how long a message may wait for its erasure; past it
	// the eraser deletes it without erasing (eraser.run).
	eraseMaxLag = 10 * time.Second
	// eraseGrace is how long a stopping worker waits for its queued
	// erasures.
	eraseGrace = 10 * time.Second
	// eraseWindow is how far back RunTokenEraser looks: the longest token
	// lifetime it covers, plus the margin and a sweep.
	eraseWindow = 15 * time.Minute
)

// tokenTTL is the TTL of an outcome whose token expires at expires: whole
// seconds (what JetStream takes), at least one, eraseMargin past the expiry.
func tokenTTL(expires, now time.Time) time.Duration {
	return max((expires.Sub(now) + eraseMargin + time.Second - 1).Truncate(time.Second), time.Second)
}

// erase queues message seq of the stream for erasure; what names it in a
// log line.
func (w *Worker) erase(seq uint64, what string) {
	w.eraser.add(seq, what)
}

// eraser erases messages one at a time, in the order asked, beside the
// worker's threads. One at a time, because nats-server erases a message by
// rewriting its whole block file (up to 8 MB, fsynced): erasures sent all at
// once would queue up in the server ahead of every other request of the
// stream, while one at a time they take their turn and a backlog waits here.
// bench/FINDINGS.md measures the cost.
type eraser struct {
	s     jetstream.Stream
	log   *slog.Logger
	mu    sync.Mutex
	queue []eraseJob
	wake  chan struct{}
	// idle is closed while nothing is queued or being erased, and
	// replaced when an erasure is queued.
	idle       chan struct{}
	idleClosed bool
	// skipped counts messages deleted unerased since warned.
	skipped int
	warned  time.Time
}

type eraseJob struct {
	seq    uint64
	what   string
	queued time.Time
}

func newEraser(s jetstream.Stream, log *slog.Logger) *eraser {
	idle := make(chan struct{})
	close(idle)
	return &eraser{s: s, log: log, wake: make(chan struct{}, 1), idle: idle, idleClosed: true}
}

func (e *eraser) add(seq uint64, what string) {
	e.mu.Lock()
	if e.idleClosed {
		e.idle, e.idleClosed = make(chan struct{}), false
	}
	e.queue = append(e.queue, eraseJob{seq, what, time.Now()})
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

// run erases what is queued until ctx ends.
func (e *eraser) run(ctx context.Context) {
	for {
		e.mu.Lock()
		if len(e.queue) == 0 {
			if !e.idleClosed {
				close(e.idle)
				e.idleClosed = true
			}
			e.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-e.wake:
			}
			continue
		}
		job := e.queue[0]
		e.mu.Unlock()
		dctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		var err error
		if time.Since(job.queued) > eraseMaxLag {
			// Behind: a message waiting here stays readable through the
			// stream's API. Delete it at once instead; its bytes stay on
			// disk until the server compacts its block.
			err = e.s.DeleteMsg(dctx, job.seq)
			e.behind(time.Now())
		} else {
			err = e.s.SecureDeleteMsg(dctx, job.seq)
		}
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("erase "+job.what, slog.Uint64("seq", job.seq), slog.Any("error", err))
		}
		e.mu.Lock()
		e.queue = e.queue[1:]
		e.mu.Unlock()
	}
}

// behind counts a message deleted without erasing its bytes, and says so in
// the log at most once a minute.
func (e *eraser) behind(now time.Time) {
	e.skipped++
	if now.Sub(e.warned) < time.Minute {
		return
	}
	e.log.Warn("erasing falls behind: messages deleted without erasing their bytes, which stay on disk until the server compacts their blocks",
		slog.Int("messages", e.skipped), slog.Duration("max_lag", eraseMaxLag))
	e.skipped, e.warned = 0, now
}

// drained returns a channel closed once nothing is queued, and how many
// erasures are queued now.
func (e *eraser) drained() (<-chan struct{}, int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.idle, len(e.queue)
}

// eraseAt erases the outcome at seq when its token expires at at. Erasures
// still pending when Run returns are left to the token eraser and the TTL.
func (w *Worker) eraseAt(seq uint64, at time.Time) {
	if seq == 0 {
		return
	}
	w.timersMu.Lock()
	defer w.timersMu.Unlock()
	if w.timersStopped {
		return
	}
	var t *time.Timer
	t = time.AfterFunc(max(at.Sub(w.cfg.Now()), 0), func() {
		w.timersMu.Lock()
		delete(w.timers, t)
		stopped := w.timersStopped
		w.timersMu.Unlock()
		if !stopped {
			w.erase(seq, "an expired token")
		}
	})
	w.timers[t] = struct{}{}
}

// stopErasures drops the erasures still pending (Run's end).
func (w *Worker) stopErasures() {
	w.timersMu.Lock()
	defer w.timersMu.Unlock()
	w.timersStopped = true
	for t := range w.timers {
		t.Stop()
	}
	clear(w.timers)
}

// EraseExpiredTokens erases, from the stream's files, every solved outcome
// stored in the last eraseWindow whose token has expired by now, and returns
// how many it erased. Workers erase their own at expiry; this catches those
// whose worker stopped first. It needs a user that may create consumers and
// delete messages (the admin).
func EraseExpiredTokens(ctx context.Context, js jetstream.JetStream, t Topology, now time.Time) (int, error) {
	t = t.withDefaults()
	s, err := js.Stream(ctx, t.Stream)
	if err != nil {
		return 0, fmt.Errorf("erase expired tokens: %w", err)
	}
	var expired []uint64
	err = scan(ctx, s, scanOpts{subjects: []string{subjectResults + ".*"}, startTime: now.Add(-eraseWindow)}, func(m jetstream.Msg) (bool, error) {
		var out Outcome
		if json.Unmarshal(m.Data(), &out) != nil || len(out.Solution) == 0 || now.Before(out.ExpiresAt) {
			return false, nil
		}
		if md, err := m.Metadata(); err == nil {
			expired = append(expired, md.Sequence.Stream)
		}
		return false, nil
	})
	if err != nil {
		return 0, fmt.Errorf("erase expired tokens: %w", err)
	}
	n := 0
	for _, seq := range expired {
		err := s.SecureDeleteMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // its worker erased it meanwhile
		}
		if err != nil {
			return n, fmt.Errorf("erase expired token (message %d): %w", seq, err)
		}
		n++
	}
	return n, nil
}

// RunTokenEraser runs EraseExpiredTokens every eraseSweepEvery until ctx
// ends, logging what it erased and what failed.
func RunTokenEraser(ctx context.Context, js jetstream.JetStream, t Topology, log *slog.Logger) {
	tick := time.NewTicker(eraseSweepEvery)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		sctx, cancel := context.WithTimeout(ctx, eraseSweepEvery)
		n, err := EraseExpiredTokens(sctx, js, t, time.Now())
		cancel()
		switch {
		case err != nil && ctx.Err() == nil:
			log.Warn("erase expired tokens", slog.Any("error", err))
		case n > 0:
			log.Info("erased expired tokens whose worker had stopped", slog.Int("count", n))
		}
	}
}

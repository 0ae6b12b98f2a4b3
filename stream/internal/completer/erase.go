package completer

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// Page URLs leave the store's files, not only the stream. JetStream's
// delete and its TTL and MaxAge expiry only mark a message removed: the
// bytes stay in the block file until the block is compacted, and the last
// block never is. So a finished task's message (it holds the page URL) is
// erased (SecureDeleteMsg overwrites the message) by the worker that stored
// its outcome, at once (Complete). On a store encrypted at rest (the
// shipped nats.conf's, and every store package broker starts with a key)
// nats-server makes the same request a plain delete: nothing in the files
// is readable without the key, so there is nothing to overwrite, and no
// block rewrite to pay. A worker cannot tell which store it has, so it
// always asks for the erasure. Tokens never reach the store's files: they
// live in the memory-backed token stream.
const (
	// eraseMaxLag is how long a message may wait for its erasure; past it
	// the eraser deletes it without erasing (eraser.run).
	eraseMaxLag = 10 * time.Second
	// EraseGrace is how long a stopping worker waits for its queued
	// erasures.
	EraseGrace = 10 * time.Second
)

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
	// plain deletes every message without erasing it (stream.WorkerConfig.NoErase).
	plain bool
	// skipped counts messages deleted unerased since warned.
	skipped int
	warned  time.Time
}

type eraseJob struct {
	seq    uint64
	what   string
	queued time.Time
	// then, when set, runs once the message is erased (or could not be):
	// the ack that removes it from a WorkQueue stream, which must come
	// after the erasure, or it would remove the message unerased. While the
	// eraser is behind it runs at once instead of a delete.
	then func()
}

func newEraser(s jetstream.Stream, log *slog.Logger) *eraser {
	idle := make(chan struct{})
	close(idle)
	return &eraser{s: s, log: log, wake: make(chan struct{}, 1), idle: idle, idleClosed: true}
}

func (e *eraser) add(seq uint64, what string, then func()) {
	e.mu.Lock()
	if e.idleClosed {
		e.idle, e.idleClosed = make(chan struct{}), false
	}
	e.queue = append(e.queue, eraseJob{seq, what, time.Now(), then})
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
		switch {
		case e.plain:
			err = e.s.DeleteMsg(dctx, job.seq)
		case time.Since(job.queued) > eraseMaxLag && job.then != nil:
			// Behind: the ack that follows removes the message unerased.
			e.behind(time.Now())
		case time.Since(job.queued) > eraseMaxLag:
			// Behind: a message waiting here stays readable through the
			// stream's API. Delete it at once instead; its bytes stay on
			// disk until the server compacts its block.
			err = e.s.DeleteMsg(dctx, job.seq)
			e.behind(time.Now())
		default:
			err = e.s.SecureDeleteMsg(dctx, job.seq)
		}
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			if ctx.Err() != nil {
				return
			}
			e.log.Warn("erase "+job.what, slog.Uint64("seq", job.seq), slog.Any("error", err))
		}
		if job.then != nil {
			job.then()
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

// Package completer finishes the deliveries whose outcome is stored: it
// acks the task message and erases it, beside the worker's threads.
package completer

import (
	"context"
	"log/slog"

	"github.com/nats-io/nats.go/jetstream"
)

// Completer finishes deliveries: the executor's Completer.
type Completer struct {
	eraser *eraser
	// workQueue says the stream has WorkQueue retention: an ack removes
	// the task message.
	workQueue bool
	// encrypted reports whether the broker's store is encrypted at rest,
	// as its server last said.
	encrypted func() bool
	// Acked, when set, is called after an ack sent once the task's thread
	// was given back (after the erasure): the ack is what makes room in a
	// limited lane.
	Acked func(m jetstream.Msg)
}

// New finishes deliveries of stream s. plain deletes finished task
// messages instead of erasing them (stream.WorkerConfig.NoErase);
// encrypted reports whether the server says its store is encrypted at
// rest. Run must run for erasures to happen.
func New(s jetstream.Stream, log *slog.Logger, plain bool, encrypted func() bool) *Completer {
	e := newEraser(s, log)
	e.plain = plain
	return &Completer{eraser: e, workQueue: s.CachedInfo().Config.Retention == jetstream.WorkQueuePolicy, encrypted: encrypted}
}

// WorkQueue reports whether the stream has WorkQueue retention.
func (c *Completer) WorkQueue() bool { return c.workQueue }

// Run erases what is queued until ctx ends.
func (c *Completer) Run(ctx context.Context) { c.eraser.run(ctx) }

// Drained returns a channel closed once nothing is queued or being
// erased, and how many messages are queued now.
func (c *Completer) Drained() (<-chan struct{}, int) { return c.eraser.drained() }

// Complete acks a task whose outcome is stored, and so removes the task
// message from the stream (WorkQueue retention): it holds the page URL,
// which may be personal data and is not needed any more (a dead letter
// keeps its own copy for replay; the event log keeps the host, the
// submitter and the times for the audit trail). On a store the server does
// not report encrypted at rest the message is erased first: a removed
// message's bytes stay in the store's files until its block is compacted.
// On a stream with Limits retention (made by an earlier version) the ack
// leaves the message, and it is erased after the ack.
//
// The ack is not confirmed (a lost one brings the task back, and its state
// says it is done) and the erasure runs in the background: neither holds up
// the thread.
func (c *Completer) Complete(m jetstream.Msg, gen uint64, log *slog.Logger) {
	if c.workQueue && (c.eraser.plain || c.encrypted()) {
		ack(m, log)
		return
	}
	if c.workQueue {
		c.eraser.add(gen, "the finished task message", func() {
			if ack(m, log) && c.Acked != nil {
				c.Acked(m)
			}
		})
		return
	}
	if ack(m, log) {
		c.eraser.add(gen, "the finished task message", nil)
	}
}

// ack acks the delivery, and reports whether the ack was sent.
func ack(m jetstream.Msg, log *slog.Logger) bool {
	if err := m.Ack(); err != nil {
		log.Warn("ack", slog.Any("error", err))
		return false
	}
	return true
}

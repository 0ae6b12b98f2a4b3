// The workers' consumers: one per lane and priority, each reading its
// task subject.

package topology

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// ConsumerName is the durable name of the workers' consumer for a lane and
// priority.
func ConsumerName(lane wire.Lane, priority wire.Priority) string {
	return fmt.Sprintf("workers-%s-%s", lane, priority)
}

// WorkerConsumer names one of the workers' consumers.
type WorkerConsumer struct {
	Lane     wire.Lane
	Priority wire.Priority
}

// WorkerConsumers lists the consumers in the order a worker with a free slot
// looks at them: high priority in every lane first, then normal.
func WorkerConsumers() []WorkerConsumer {
	var out []WorkerConsumer
	for _, p := range wire.Priorities {
		for _, l := range wire.Lanes {
			out = append(out, WorkerConsumer{Lane: l, Priority: p})
		}
	}
	return out
}

// ConsumerConfig is the configuration of the workers' consumer wc of t.
func ConsumerConfig(t Spec, wc WorkerConsumer) jetstream.ConsumerConfig {
	limit := t.MaxInFlight
	if n := t.LaneLimits[wc.Lane]; n > 0 && wc.Priority == wire.PriorityNormal {
		limit = n
	}
	return jetstream.ConsumerConfig{
		Durable:       ConsumerName(wc.Lane, wc.Priority),
		Description:   fmt.Sprintf("captchaq workers: %s lane, %s priority", wc.Lane, wc.Priority),
		FilterSubject: wire.TaskFilter(wc.Lane, wc.Priority),
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		// Unlimited: the worker counts attempts itself in the task's event
		// log and dead-letters the task when the budget is spent, so no task
		// is ever stranded by MaxDeliver with nobody listening.
		MaxDeliver:    -1,
		MaxAckPending: limit,
		DeliverPolicy: jetstream.DeliverAllPolicy,
		ReplayPolicy:  jetstream.ReplayInstantPolicy,
		Replicas:      0, // as the stream
	}
}

// WaitingRoomConfig is the consumer of the waiting room
// (wire.SubjectLater), which workers alone read: tasks that are not due
// wait there, each handed back with its delay, so that its MaxAckPending
// is unlimited (every waiting task is pending, and none may hold up
// another), while the workers' consumers of the lanes count only tasks
// that are due.
func WaitingRoomConfig(t Spec) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:        wire.WaitingRoomConsumer,
		Description:    "captchaq workers: the waiting room (tasks not due yet)",
		FilterSubjects: wire.LaterFilters(),
		AckPolicy:      jetstream.AckExplicitPolicy,
		AckWait:        t.AckWait,
		MaxDeliver:     -1, // as the lanes': a task never strands
		MaxAckPending:  -1,
		DeliverPolicy:  jetstream.DeliverAllPolicy,
		ReplayPolicy:   jetstream.ReplayInstantPolicy,
		Replicas:       0, // as the stream
	}
}

// HasWaitingRoom reports whether a stream whose subjects are subjects
// stores the waiting room's: a stream made by an earlier version does not
// until its topology is updated (`captchaq init`).
func HasWaitingRoom(subjects []string) bool {
	for _, f := range wire.LaterFilters() {
		if !slices.Contains(subjects, f) {
			return false
		}
	}
	return true
}

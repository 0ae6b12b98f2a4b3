// The workers' consumers: one per lane and priority, each reading its
// task subject.

package stream

import (
	"fmt"
	"slices"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// consumerName is the durable name of the workers' consumer for a lane and
// priority.
func consumerName(lane Lane, priority Priority) string {
	return fmt.Sprintf("workers-%s-%s", lane, priority)
}

type workerConsumer struct {
	lane     Lane
	priority Priority
}

// workerConsumers lists the consumers in the order a worker with a free slot
// looks at them: high priority in every lane first, then normal.
func workerConsumers() []workerConsumer {
	var out []workerConsumer
	for _, p := range wire.Priorities {
		for _, l := range Lanes {
			out = append(out, workerConsumer{lane: l, priority: p})
		}
	}
	return out
}

func (t Topology) consumerConfig(wc workerConsumer) jetstream.ConsumerConfig {
	limit := t.MaxInFlight
	if n := t.LaneLimits[wc.lane]; n > 0 && wc.priority == wire.PriorityNormal {
		limit = n
	}
	return jetstream.ConsumerConfig{
		Durable:       consumerName(wc.lane, wc.priority),
		Description:   fmt.Sprintf("captchaq workers: %s lane, %s priority", wc.lane, wc.priority),
		FilterSubject: wire.TaskFilter(wc.lane, wc.priority),
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

// waitingRoomConfig is the consumer of the waiting room
// (wire.SubjectLater), which workers alone read: tasks that are not due
// wait there, each handed back with its delay, so that its MaxAckPending
// is unlimited (every waiting task is pending, and none may hold up
// another), while the workers' consumers of the lanes count only tasks
// that are due.
func (t Topology) waitingRoomConfig() jetstream.ConsumerConfig {
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

// hasWaitingRoom reports whether a stream whose subjects are subjects
// stores the waiting room's: a stream made by an earlier version does not
// until its topology is updated (`captchaq init`).
func hasWaitingRoom(subjects []string) bool {
	for _, f := range wire.LaterFilters() {
		if !slices.Contains(subjects, f) {
			return false
		}
	}
	return true
}

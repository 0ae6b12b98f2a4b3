package main

import (
	"flag"
	"time"

	"github.com/captchaq/captchaq/stream"
)

// topoFlags set the stream's and consumers' shape; server, worker and run
// take them.
type topoFlags struct {
	replicas                int
	retention, ackWait, dup time.Duration
	maxBytes                int64
	slowLimit, fastLimit    int
}

func (t *topoFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&t.replicas, "replicas", 1, "stream replicas (3 on a JetStream cluster)")
	fs.DurationVar(&t.retention, "retention", stream.DefaultRetention, "audit retention: how long tasks, outcomes without tokens and dead letters stay")
	fs.Int64Var(&t.maxBytes, "max-bytes", 0, "bound the stream's size in bytes: once full it refuses new tasks rather than drop queued ones; 0: bounded by --retention alone")
	fs.DurationVar(&t.ackWait, "ack-wait", stream.DefaultAckWait, "how long a silent worker keeps a task before it goes to another")
	fs.DurationVar(&t.dup, "duplicate-window", stream.DefaultDuplicateWindow, "how long a task id is remembered to drop a re-published task")
	fs.IntVar(&t.slowLimit, "slow-lane-limit", 0, "at most this many normal-priority slow-lane tasks (reCAPTCHA v2, GeeTest) in flight at once across all workers; 0: no limit")
	fs.IntVar(&t.fastLimit, "fast-lane-limit", 0, "the same for the fast lane (Turnstile, reCAPTCHA v3, images)")
}

func (t *topoFlags) topology() stream.Topology {
	top := stream.Topology{Replicas: t.replicas, Retention: t.retention, AckWait: t.ackWait, DuplicateWindow: t.dup, MaxBytes: t.maxBytes}
	if t.dup == stream.DefaultDuplicateWindow {
		// The default, which the stream cuts to a shorter --retention; a
		// window set longer than the retention is refused.
		top.DuplicateWindow = 0
	}
	if t.slowLimit > 0 || t.fastLimit > 0 {
		top.LaneLimits = map[stream.Lane]int{stream.LaneSlow: t.slowLimit, stream.LaneFast: t.fastLimit}
	}
	return top
}

package wire

import (
	"fmt"
	"time"
)

// Heartbeats: a running worker stores one every HeartbeatEvery on
// captcha.workers.<name>, each living HeartbeatTTL (Nats-TTL), so the
// stream holds a few per worker and none of a worker gone for longer.
const (
	HeartbeatEvery = 5 * time.Second
	HeartbeatTTL   = 3 * HeartbeatEvery
)

// WorkerInfo is a worker's heartbeat, as `captchaq workers ls` lists it. It
// is part of the wire contract.
type WorkerInfo struct {
	// Name is the worker's name in the audit trail.
	Name string `json:"name"`
	// Host and PID say where it runs.
	Host string `json:"host,omitempty"`
	PID  int    `json:"pid,omitempty"`
	// Threads is its --threads; InUse how many of them hold a task now.
	Threads int `json:"threads"`
	InUse   int `json:"in_use"`
	// Started is when it started taking tasks.
	Started time.Time `json:"started"`
	// At is when it sent this heartbeat: when it was last seen.
	At time.Time `json:"at"`
	// Stopped is set on the last heartbeat of a worker that stopped.
	Stopped bool `json:"stopped,omitempty"`
	// Tasks are the task generations it holds from their recorded attempt
	// to their end: a worker given one of them again while this heartbeat
	// is the holder's latest waits instead of paying the service again.
	// Held counts them. When they are too many for one message (a
	// per-solve provider's max_in_flight runs to 10000 captchas a worker),
	// the heartbeat is split: the messages at the stream sequences
	// HeldParts, stored just before this one on the same subject, each a
	// copy of this WorkerInfo with Part set, carry the list between them,
	// and this last message carries those held since the parts' list was
	// read (Held counts all: more than are named says some could not be).
	// A reader takes a split heartbeat as old as its first part.
	Tasks     []HeldTask `json:"tasks,omitempty"`
	Held      int        `json:"held,omitempty"`
	HeldParts []uint64   `json:"held_parts,omitempty"`
	// Part is set on a message that carries part of a split heartbeat's
	// Tasks; the heartbeat's last message, which names it in HeldParts,
	// follows it.
	Part bool `json:"part,omitempty"`
	// ServiceDownSince is set while the solving service does not answer
	// this worker (refused connections, no reply, a run of HTTP 5xx): since
	// when. The worker submits nothing meanwhile; ServiceDown says what
	// failed last (by host, never the key).
	ServiceDownSince time.Time `json:"service_down_since,omitzero"`
	ServiceDown      string    `json:"service_down,omitempty"`
	// HeldAtService counts the captchas the service has accepted from this
	// worker and not answered yet.
	HeldAtService int `json:"held_at_service,omitempty"`
}

// ServiceState says whether the worker's solving service answers, as
// `captchaq stats` and the dashboard show it: "" while it does, else
// "service unreachable since <time> (<n> captchas held at the service)".
func (w WorkerInfo) ServiceState() string {
	if w.ServiceDownSince.IsZero() {
		return ""
	}
	return fmt.Sprintf("service unreachable since %s (%d captchas held at the service)",
		w.ServiceDownSince.UTC().Format(time.RFC3339), w.HeldAtService)
}

// HeldTask names a task generation a worker holds (WorkerInfo.Tasks).
type HeldTask struct {
	ID  string `json:"id"`
	Gen uint64 `json:"gen"`
}

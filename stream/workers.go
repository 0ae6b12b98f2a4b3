package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// subjectWorkers holds the workers' heartbeats: captcha.workers.<name>.
const subjectWorkers = "captcha.workers"

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
	Tasks []HeldTask `json:"tasks,omitempty"`
}

var notInToken = regexp.MustCompile(`[^A-Za-z0-9_-]`)

// heartbeatSubject is the subject of a worker's heartbeats: its name made a
// subject token.
func heartbeatSubject(name string) string {
	tok := notInToken.ReplaceAllString(name, "_")
	if len(tok) > maxIDLength {
		tok = tok[:maxIDLength]
	}
	return subjectWorkers + "." + tok
}

// announce stores the worker's heartbeat now and every HeartbeatEvery until
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
		msg := nats.NewMsg(heartbeatSubject(w.cfg.Name))
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
		t := time.NewTicker(HeartbeatEvery)
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

// HeldTask names a task generation a worker holds (WorkerInfo.Tasks).
type HeldTask struct {
	ID  string `json:"id"`
	Gen uint64 `json:"gen"`
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

// Workers returns the workers seen within HeartbeatTTL, by name, from their
// last heartbeats; a worker that said it stopped is listed with Stopped
// until its heartbeat expires.
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	info, err := c.s.Info(ctx, jetstream.WithSubjectFilter(subjectWorkers+".>"))
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	now := c.cfg.Now()
	var out []WorkerInfo
	for subj := range info.State.Subjects {
		m, err := c.s.GetLastMsgForSubject(ctx, subj)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue // expired meanwhile
		}
		if err != nil {
			return nil, fmt.Errorf("list workers: %w", err)
		}
		var wi WorkerInfo
		if json.Unmarshal(m.Data, &wi) != nil || wi.Name == "" || now.Sub(wi.At) > HeartbeatTTL {
			continue
		}
		out = append(out, wi)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

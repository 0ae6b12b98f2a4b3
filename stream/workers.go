package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
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
		info.At, info.InUse = w.cfg.Now(), inUse()
		b, err := json.Marshal(info)
		if err != nil {
			return
		}
		msg := nats.NewMsg(heartbeatSubject(w.cfg.Name))
		msg.Data = b
		bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		if _, err := w.js.PublishMsg(bctx, msg, jetstream.WithMsgTTL(HeartbeatTTL)); err != nil && ctx.Err() == nil {
			w.log.Debug("heartbeat not stored", slog.Any("error", err))
		}
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		t := time.NewTicker(HeartbeatEvery)
		defer t.Stop()
		for {
			beat(ctx)
			select {
			case <-ctx.Done():
				info.Stopped = true
				beat(context.WithoutCancel(ctx))
				return
			case <-t.C:
			}
		}
	}()
	return func() { <-done }
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

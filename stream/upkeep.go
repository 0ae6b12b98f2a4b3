// The worker's background services (package upkeep), as the worker
// builds them for Run.

package stream

import (
	"context"
	"os"
	"sync"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/upkeep"
	"github.com/captchaq/captchaq/stream/wire"
)

// heartbeatService is the worker's heartbeat, for `captchaq workers ls`;
// inUse counts its busy threads.
func (w *Worker) heartbeatService(inUse func() int) *upkeep.Heartbeat {
	host, _ := os.Hostname()
	h := &upkeep.Heartbeat{
		Info:  wire.WorkerInfo{Name: w.cfg.Name, Host: host, PID: os.Getpid(), Threads: w.cfg.Threads, Started: w.cfg.Now()},
		Now:   w.cfg.Now,
		InUse: inUse,
		Held:  w.held.List,
		JS:    w.js, Stream: w.s, Reach: &w.reach, Clock: &w.clock, Log: w.log,
	}
	var maxMsg int32
	if info := w.s.CachedInfo(); info != nil {
		maxMsg = info.Config.MaxMsgSize
	}
	h.MaxMessage = upkeep.HeartbeatMessageMax(w.nc.MaxPayload(), maxMsg)
	if sc := w.serviceClient(); sc != nil {
		h.Service = sc
	}
	return h
}

// serviceClient is the worker's *solver.Client, built or given, whose
// outage and held captchas its heartbeat carries; nil for another Solver.
func (w *Worker) serviceClient() *solver.Client {
	if w.built != nil {
		return w.built
	}
	sc, _ := w.cfg.Solver.(*solver.Client)
	return sc
}

// cancelRelay relays owners' cancels to their tasks' records.
func (w *Worker) cancelRelay() *upkeep.CancelRelay {
	return &upkeep.CancelRelay{NC: w.nc, JS: w.js, Stream: w.s, StreamName: w.top.Stream, Domain: w.top.Domain, Log: w.log}
}

// learning shares what the worker's solving client learns with the pool;
// nil when it learns nothing or learns alone (WorkerConfig.LearnAlone).
func (w *Worker) learning() *upkeep.Learning {
	if w.learner == nil || w.cfg.LearnAlone {
		return nil
	}
	return &upkeep.Learning{Learner: w.learner, Name: w.cfg.Name, Now: w.cfg.Now, Clock: &w.clock, Every: w.cfg.ShareTimingsEvery,
		NC: w.nc, JS: w.js, Domain: w.top.Domain, Log: w.log, Requota: w.dispatch.Plan.Refresh}
}

// waitingRoomService executes the waiting room's deliveries under hard,
// counted in inflight; nil when the stream has no waiting room.
func (w *Worker) waitingRoomService(hard context.Context, inflight *sync.WaitGroup) *upkeep.WaitingRoom {
	if w.waitingRoom == nil {
		return nil
	}
	return &upkeep.WaitingRoom{Consumer: w.waitingRoom, Inflight: inflight, IdleCheck: w.cfg.IdleCheck, Log: w.log,
		Execute: func(m jetstream.Msg) {
			defer w.survive(m)
			w.exec.Execute(hard, m, nil, nil)
		}}
}

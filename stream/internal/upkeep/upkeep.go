// Package upkeep holds a worker's background services, each behind one
// start/stop shape (Service) and started and stopped in a written order
// (Group): the heartbeat (Heartbeat), the relay of owners' cancels
// (CancelRelay), sharing what the solving client learns with the pool
// (Learning), the waiting room's pull (WaitingRoom), and any loop that
// runs until its context ends (Loop), such as the completer's eraser.
// Package stream's Worker.Run starts them around its pull of tasks.
package upkeep

import (
	"context"
	"sync"
)

// Service is one of a worker's background services.
type Service interface {
	// Start begins the service, which runs until ctx ends or Stop is
	// called. It returns once the service has started (its first
	// heartbeat sent, its subscription made), or with the error that kept
	// it from starting.
	Start(ctx context.Context) error
	// Stop ends the service and returns once it has ended, with what it
	// does last (a last heartbeat, a last share). Stopping a service that
	// did not start, or twice, does nothing.
	Stop()
}

// Group is the services a worker started, stopped in the reverse order of
// their start: a service started later may rely on one started earlier
// until it stops. The zero value is an empty group.
type Group struct {
	started []Service
}

// Start starts s under ctx and, once it has started, adds it to the
// group; an error leaves it out.
func (g *Group) Start(ctx context.Context, s Service) error {
	if err := s.Start(ctx); err != nil {
		return err
	}
	g.started = append(g.started, s)
	return nil
}

// Stop stops every service started, the last started first.
func (g *Group) Stop() {
	for i := len(g.started) - 1; i >= 0; i-- {
		g.started[i].Stop()
	}
	g.started = nil
}

// runner is the goroutine of a service: run starts it under a context of
// its own, which stop cancels before it waits for the goroutine to end.
type runner struct {
	mu     sync.Mutex
	cancel context.CancelFunc
	done   chan struct{}
}

// run starts fn in a goroutine, under a context that ends with ctx or at
// stop.
func (r *runner) run(ctx context.Context, fn func(ctx context.Context)) {
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	r.mu.Lock()
	r.cancel, r.done = cancel, done
	r.mu.Unlock()
	go func() {
		defer close(done)
		fn(ctx)
	}()
}

// stop ends the goroutine run started and waits for it; false when none
// was running.
func (r *runner) stop() bool {
	r.mu.Lock()
	cancel, done := r.cancel, r.done
	r.cancel, r.done = nil, nil
	r.mu.Unlock()
	if cancel == nil {
		return false
	}
	cancel()
	<-done
	return true
}

// Loop is a service that runs fn until its context ends (the completer's
// eraser, say).
func Loop(fn func(ctx context.Context)) Service { return &loop{fn: fn} }

type loop struct {
	fn func(ctx context.Context)
	r  runner
}

func (l *loop) Start(ctx context.Context) error { l.r.run(ctx, l.fn); return nil }
func (l *loop) Stop()                           { l.r.stop() }

package upkeep

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// Waiting room pulls: how many deliveries one pull asks for, how long it
// waits for them, and how many are executed at once.
const (
	waitingRoomBatch       = 32
	waitingRoomPoll        = 5 * time.Second
	waitingRoomConcurrency = 8
)

// WaitingRoom executes the waiting room's deliveries while it runs: each
// is handed back until its task is due, moved back to its task subject
// when it is, or ended (canceled, expired, invalid). None holds a worker
// thread or a plan thread: each is a few writes.
type WaitingRoom struct {
	// Consumer is the waiting room's consumer.
	Consumer jetstream.Consumer
	// Execute executes one delivery; each runs on a goroutine of its own,
	// counted in Inflight from before it starts.
	Execute  func(m jetstream.Msg)
	Inflight *sync.WaitGroup
	// IdleCheck is how long it pauses after a failed pull.
	IdleCheck time.Duration
	Log       *slog.Logger

	r runner
}

// Start pulls until ctx ends or Stop.
func (w *WaitingRoom) Start(ctx context.Context) error {
	w.r.run(ctx, w.pull)
	return nil
}

// Stop stops pulling and returns once no pull is under way; the
// executions it started go on, counted in Inflight.
func (w *WaitingRoom) Stop() { w.r.stop() }

func (w *WaitingRoom) pull(ctx context.Context) {
	sem := make(chan struct{}, waitingRoomConcurrency)
	for ctx.Err() == nil {
		fctx, cancel := context.WithTimeout(ctx, waitingRoomPoll)
		batch, err := w.Consumer.Fetch(waitingRoomBatch, jetstream.FetchContext(fctx))
		if err != nil {
			cancel()
			if ctx.Err() == nil {
				w.Log.Debug("fetch from the waiting room", slog.Any("error", err))
				dispatcher.Pause(ctx, w.IdleCheck)
			}
			continue
		}
		for m := range batch.Messages() {
			sem <- struct{}{}
			w.Inflight.Add(1)
			go func() {
				defer w.Inflight.Done()
				defer func() { <-sem }()
				w.Execute(m)
			}()
		}
		if err := batch.Error(); err != nil && ctx.Err() == nil && !errors.Is(err, jetstream.ErrNoMessages) &&
			!errors.Is(err, context.DeadlineExceeded) {
			w.Log.Debug("fetch from the waiting room", slog.Any("error", err))
			dispatcher.Pause(ctx, w.IdleCheck)
		}
		cancel()
	}
}

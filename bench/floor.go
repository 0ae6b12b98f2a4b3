package main

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// floorServer starts a server for a floor row (over TCP, the store
// encrypted by key unless it is empty) and connects a producer and a
// worker to it; stop closes both and the server.
func floorServer(lazy bool, key string) (pjs, wjs jetstream.JetStream, stop func(), err error) {
	_, connect, stopServer, err := embeddedStore(lazy, true, key)
	if err != nil {
		return nil, nil, nil, err
	}
	pnc, err := connect()
	if err != nil {
		stopServer()
		return nil, nil, nil, err
	}
	wnc, err := connect()
	if err != nil {
		pnc.Close()
		stopServer()
		return nil, nil, nil, err
	}
	pjs, _ = jetstream.New(pnc)
	wjs, _ = jetstream.New(wnc)
	return pjs, wjs, func() { wnc.Close(); pnc.Close(); stopServer() }, nil
}

// runFloor runs the load through bare JetStream: one stream, one durable pull
// consumer, sync publish, and per thread Fetch(1) + handler + Ack. No task
// validation, no event log, no result message.
func runFloor(ctx context.Context, l load, lazy bool) (outcome, error) {
	pjs, wjs, stop, err := floorServer(lazy, "")
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	if _, err := pjs.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage}); err != nil {
		return outcome{}, err
	}
	cons, err := wjs.CreateOrUpdateConsumer(ctx, "FLOOR", jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 10000})
	if err != nil {
		return outcome{}, err
	}
	clk := newClock(l.Tasks)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	pullEach(wctx, &wg, cons, l.Threads, func(m jetstream.Msg) {
		clk.started(indexOfID(m.Subject()[len("floor.tasks."):]))
		_ = m.Ack()
		clk.completed()
	})
	return measure(ctx, l, clk, floorProducer(ctx, l, pjs))
}

// pullEach runs threads goroutines on wg that fetch one message at a time
// from cons and hand it to handle, until ctx ends.
func pullEach(ctx context.Context, wg *sync.WaitGroup, cons jetstream.Consumer, threads int, handle func(jetstream.Msg)) {
	for range threads {
		wg.Go(func() {
			for ctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					handle(m)
				}
			}
		})
	}
}

// floorProducer returns the floor rows' submit: task i's JSON, encoded
// beforehand, published on floor.tasks.<id> with its id as message id.
func floorProducer(ctx context.Context, l load, pjs jetstream.JetStream) func(i int) error {
	payloads := make([][]byte, l.Tasks)
	for i := range payloads {
		payloads[i], _ = json.Marshal(benchTask(i))
	}
	return func(i int) error {
		id := "b" + strconv.Itoa(i)
		_, err := pjs.Publish(ctx, "floor.tasks."+id, payloads[i], jetstream.WithMsgID(id))
		return err
	}
}

// runFloorExchanges is runFloor making, per task, the exchanges captchaq's
// worker makes for a first delivery that succeeds, with no captchaq code:
// the direct read of the task's cancel record (there is none), the attempt
// event, the token (in a memory stream), the outcome (each a synchronous
// publish; the two records expect the last sequence over the task's record
// subjects, 0 for the first, as captchaq's compare-and-set does), the ack,
// and the delete of the task message; the store is encrypted, as
// captchaq's default. The producer publishes the same task JSON. The gap
// between this row and the floor is what those exchanges cost on
// nats-server; the gap between it and captchaq is captchaq's code.
func runFloorExchanges(ctx context.Context, l load, lazy bool) (outcome, error) {
	pjs, wjs, stop, err := floorServer(lazy, benchStoreKey)
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	s, err := pjs.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR", Subjects: []string{"floor.>"}, Storage: jetstream.FileStorage, AllowDirect: true})
	if err != nil {
		return outcome{}, err
	}
	if _, err := pjs.CreateStream(ctx, jetstream.StreamConfig{Name: "FLOOR_TOKENS", Subjects: []string{"floortok.>"}, Storage: jetstream.MemoryStorage,
		AllowMsgTTL: true}); err != nil {
		return outcome{}, err
	}
	cons, err := wjs.CreateOrUpdateConsumer(ctx, "FLOOR", jetstream.ConsumerConfig{Durable: "floor", AckPolicy: jetstream.AckExplicitPolicy,
		AckWait: 30 * time.Second, MaxAckPending: 10000, FilterSubject: "floor.tasks.>"})
	if err != nil {
		return outcome{}, err
	}
	event, token, result := []byte(`{"kind":"attempt","attempts":1}`), []byte(`{"token":"tok"}`), []byte(`{"status":"solved"}`)
	clk := newClock(l.Tasks)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	// One goroutine deletes, one at a time beside the threads, as
	// captchaq's eraser does.
	deletes := make(chan uint64, l.Tasks)
	wg.Go(func() {
		for {
			select {
			case <-wctx.Done():
				return
			case seq := <-deletes:
				_ = s.SecureDeleteMsg(wctx, seq)
			}
		}
	})
	pullEach(wctx, &wg, cons, l.Threads, func(m jetstream.Msg) {
		id := m.Subject()[len("floor.tasks."):]
		meta, err := m.Metadata()
		if err != nil {
			return
		}
		if _, err := s.GetLastMsgForSubject(wctx, "floor.cancels."+id+".admin"); !errors.Is(err, jetstream.ErrMsgNotFound) {
			return
		}
		ev, err := wjs.Publish(wctx, "floor.rec.events."+id, event, jetstream.WithExpectLastSequenceForSubject(0, "floor.rec.*."+id))
		if err != nil {
			return
		}
		clk.started(indexOfID(id))
		if _, err := wjs.Publish(wctx, "floortok."+id, token, jetstream.WithMsgTTL(time.Minute)); err != nil {
			return
		}
		if _, err := wjs.Publish(wctx, "floor.rec.results."+id, result, jetstream.WithExpectLastSequenceForSubject(ev.Sequence, "floor.rec.*."+id)); err != nil {
			return
		}
		_ = m.Ack()
		clk.completed()
		deletes <- meta.Sequence.Stream
	})
	return measure(ctx, l, clk, floorProducer(ctx, l, pjs))
}

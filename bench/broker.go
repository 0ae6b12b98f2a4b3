package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hibiken/asynq"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/redis/go-redis/v9"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
)

// load is one broker-bound run: how many tasks, how many worker threads, and
// how they arrive: a burst from Producers goroutines submitting as fast as
// they can (Rate 0), or one producer at a fixed Rate per second.
type load struct {
	Tasks     int
	Threads   int
	Producers int
	Rate      float64
	Timeout   time.Duration
}

// outcome is what one run measured.
type outcome struct {
	Tasks    int
	Elapsed  time.Duration // first submit to last completion
	P50, P99 time.Duration // submit → start of solving
	Mean     time.Duration
}

func (o outcome) rate() float64 { return float64(o.Tasks) / o.Elapsed.Seconds() }

func summarize(clk *clock) (outcome, error) {
	lat := clk.latencies()
	o := outcome{Tasks: int(clk.done.Load()), P50: percentile(lat, 0.50), P99: percentile(lat, 0.99), Mean: mean(lat)}
	o.Elapsed = time.Duration(clk.last.Load() - clk.firstSubmit())
	if o.Tasks < int(clk.n) {
		return o, fmt.Errorf("only %d of %d tasks completed before the timeout", o.Tasks, clk.n)
	}
	return o, nil
}

// benchTask is task i of a broker-bound run: a Turnstile task whose page URL
// ends in its index (the no-op solver sees only method and parameters).
func benchTask(i int) stream.Task {
	return stream.Task{ID: "b" + strconv.Itoa(i), Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout/" + strconv.Itoa(i)}}
}

func indexOfID(id string) int {
	i, err := strconv.Atoi(strings.TrimPrefix(id, "b"))
	if err != nil {
		return -1
	}
	return i
}

func indexOfURL(u string) int {
	i, err := strconv.Atoi(u[strings.LastIndexByte(u, '/')+1:])
	if err != nil {
		return -1
	}
	return i
}

// produce submits tasks 0..Tasks-1 with submit, stamping each just before.
func produce(ctx context.Context, l load, clk *clock, submit func(i int) error) error {
	if l.Rate > 0 {
		t0 := time.Now()
		for i := range l.Tasks {
			if d := time.Until(t0.Add(time.Duration(float64(i) / l.Rate * float64(time.Second)))); d > 0 {
				select {
				case <-ctx.Done():
					return ctx.Err()
				case <-time.After(d):
				}
			}
			clk.submitted(i)
			if err := submit(i); err != nil {
				return fmt.Errorf("submit task %d: %w", i, err)
			}
		}
		return nil
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, l.Producers)
	for range max(l.Producers, 1) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= l.Tasks || ctx.Err() != nil {
					return
				}
				clk.submitted(i)
				if err := submit(i); err != nil {
					errs <- fmt.Errorf("submit task %d: %w", i, err)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// await waits until every task completed or the load's timeout passed.
func await(ctx context.Context, l load, clk *clock) {
	t := time.NewTimer(l.Timeout)
	defer t.Stop()
	select {
	case <-clk.all:
	case <-t.C:
	case <-ctx.Done():
	}
}

// embedded starts a nats-server for one run, listening on 127.0.0.1 when tcp
// is set, with a store that is removed by the returned stop function.
func embedded(lazy, tcp bool) (*server.Server, func(...nats.Option) (*nats.Conn, error), func(), error) {
	dir, err := os.MkdirTemp("", "captchaq-bench-js-")
	if err != nil {
		return nil, nil, nil, err
	}
	ns, err := broker.Start(broker.Config{StoreDir: dir, LazySync: lazy, Listen: tcp})
	if err != nil {
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	connect := func(opts ...nats.Option) (*nats.Conn, error) {
		if tcp {
			return nats.Connect(ns.ClientURL(), opts...)
		}
		return nats.Connect("", append(opts, nats.InProcessServer(ns))...)
	}
	stop := func() { ns.Shutdown(); ns.WaitForShutdown(); os.RemoveAll(dir) }
	return ns, connect, stop, nil
}

// runCaptchaq runs the load through captchaq: Client.Submit, a Worker with
// l.Threads threads and a no-op solver.
func runCaptchaq(ctx context.Context, l load, lazy, tcp bool) (outcome, error) {
	_, connect, stop, err := embedded(lazy, tcp)
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	pnc, err := connect(nats.Name("bench-producer"))
	if err != nil {
		return outcome{}, err
	}
	defer pnc.Close()
	wnc, err := connect(nats.Name("bench-worker"))
	if err != nil {
		return outcome{}, err
	}
	defer wnc.Close()
	client, err := stream.NewClient(ctx, pnc, stream.ClientConfig{Name: "bench"})
	if err != nil {
		return outcome{}, err
	}
	clk := newClock(l.Tasks)
	tok := json.RawMessage(`"tok"`)
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{
		Threads: l.Threads,
		Name:    "bench-worker",
		Solver: solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
			clk.started(indexOfURL(req.Params["pageurl"]))
			return solver.Answer{Solution: tok}, nil
		}),
		Observer: stream.ObserverFunc(func(o stream.Observation) {
			if o.Kind == stream.EventSolved {
				clk.completed()
			}
		}),
		ShutdownGrace: time.Second,
	})
	if err != nil {
		return outcome{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	if err := produce(ctx, l, clk, func(i int) error {
		_, err := client.Submit(ctx, benchTask(i))
		return err
	}); err != nil {
		return outcome{}, err
	}
	await(ctx, l, clk)
	return summarize(clk)
}

// runFloor runs the load through bare JetStream: one stream, one durable pull
// consumer, sync publish, and per thread Fetch(1) + handler + Ack. No task
// validation, no event log, no result message.
func runFloor(ctx context.Context, l load) (outcome, error) {
	_, connect, stop, err := embedded(true, true)
	if err != nil {
		return outcome{}, err
	}
	defer stop()
	pnc, err := connect()
	if err != nil {
		return outcome{}, err
	}
	defer pnc.Close()
	wnc, err := connect()
	if err != nil {
		return outcome{}, err
	}
	defer wnc.Close()
	pjs, _ := jetstream.New(pnc)
	wjs, _ := jetstream.New(wnc)
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
	for range l.Threads {
		wg.Go(func() {
			for wctx.Err() == nil {
				batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
				if err != nil {
					continue
				}
				for m := range batch.Messages() {
					clk.started(indexOfID(m.Subject()[len("floor.tasks."):]))
					_ = m.Ack()
					clk.completed()
				}
			}
		})
	}
	payloads := make([][]byte, l.Tasks)
	for i := range payloads {
		payloads[i], _ = json.Marshal(benchTask(i))
	}
	if err := produce(ctx, l, clk, func(i int) error {
		id := "b" + strconv.Itoa(i)
		_, err := pjs.Publish(ctx, "floor.tasks."+id, payloads[i], jetstream.WithMsgID(id))
		return err
	}); err != nil {
		return outcome{}, err
	}
	await(ctx, l, clk)
	return summarize(clk)
}

// runRedisList runs the load through the design users build by hand on
// Redis: RPUSH the task JSON; per thread BLPOP, handler, HSET the result,
// PUBLISH a notification.
func runRedisList(ctx context.Context, l load, addr string) (outcome, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr, PoolSize: l.Threads + l.Producers + 8})
	defer rdb.Close()
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		return outcome{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	const queue = "captchaq:queue"
	clk := newClock(l.Tasks)
	wctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer func() { cancel(); wg.Wait() }()
	for range l.Threads {
		wg.Go(func() {
			for wctx.Err() == nil {
				kv, err := rdb.BLPop(wctx, time.Second, queue).Result()
				if err != nil {
					continue // redis.Nil on timeout, or the run ended
				}
				var t stream.Task
				if err := json.Unmarshal([]byte(kv[1]), &t); err != nil {
					continue
				}
				clk.started(indexOfID(t.ID))
				if err := rdb.HSet(wctx, "captchaq:result:"+t.ID, "status", "solved", "solution", "tok").Err(); err != nil {
					continue
				}
				if err := rdb.Publish(wctx, "captchaq:results", t.ID).Err(); err != nil {
					continue
				}
				clk.completed()
			}
		})
	}
	payloads := make([][]byte, l.Tasks)
	for i := range payloads {
		payloads[i], _ = json.Marshal(benchTask(i))
	}
	if err := produce(ctx, l, clk, func(i int) error {
		return rdb.RPush(ctx, queue, payloads[i]).Err()
	}); err != nil {
		return outcome{}, err
	}
	await(ctx, l, clk)
	return summarize(clk)
}

// runAsynq runs the load through hibiken/asynq on the same redis-server:
// Client.Enqueue and a Server with Concurrency = threads, defaults otherwise.
func runAsynq(ctx context.Context, l load, addr string) (outcome, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	if err := rdb.FlushDB(ctx).Err(); err != nil {
		rdb.Close()
		return outcome{}, fmt.Errorf("redis at %s: %w", addr, err)
	}
	rdb.Close()
	opt := asynq.RedisClientOpt{Addr: addr, PoolSize: l.Threads + l.Producers + 8}
	client := asynq.NewClient(opt)
	defer client.Close()
	clk := newClock(l.Tasks)
	srv := asynq.NewServer(opt, asynq.Config{Concurrency: l.Threads, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc("captcha:solve", func(ctx context.Context, t *asynq.Task) error {
		var task stream.Task
		if err := json.Unmarshal(t.Payload(), &task); err != nil {
			return fmt.Errorf("decode task: %w: %w", err, asynq.SkipRetry)
		}
		clk.started(indexOfID(task.ID))
		clk.completed()
		return nil
	})
	if err := srv.Start(mux); err != nil {
		return outcome{}, fmt.Errorf("asynq server: %w", err)
	}
	defer srv.Shutdown()
	payloads := make([][]byte, l.Tasks)
	for i := range payloads {
		payloads[i], _ = json.Marshal(benchTask(i))
	}
	if err := produce(ctx, l, clk, func(i int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("captcha:solve", payloads[i]))
		return err
	}); err != nil {
		return outcome{}, err
	}
	await(ctx, l, clk)
	return summarize(clk)
}

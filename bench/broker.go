package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
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
	// TokenLife, when positive, is the token lifetime of captchaq's workers
	// (the product's default otherwise): short, it brings the cost of a
	// token's expiry into a burst, as a pool running for longer than a
	// lifetime pays it.
	TokenLife time.Duration
	// BrokerPID is the broker's process when it is not this one (a
	// redis-server), so that its CPU time counts; 0 for in-process servers.
	BrokerPID int
	// Profile, when not empty, is the file a CPU profile of this process
	// over the run goes to.
	Profile string
}

// outcome is what one run measured.
type outcome struct {
	Tasks    int
	Elapsed  time.Duration // first submit to last completion
	P50, P99 time.Duration // submit → start of solving
	Mean     time.Duration
	CPU      cpuUse // from just before the first submit until the processes settled
}

func (o outcome) rate() float64 { return float64(o.Tasks) / o.Elapsed.Seconds() }

// cpuPerTask is the CPU time the run cost per task.
func (o outcome) cpuPerTask() time.Duration {
	if o.Tasks == 0 {
		return 0
	}
	return o.CPU.Total / time.Duration(o.Tasks)
}

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

// measure submits the load with submit, waits until every task completed
// (or the load's timeout passed) and returns what the run measured, with the
// CPU time from just before the first submit until the processes settled
// after the last completion.
func measure(ctx context.Context, l load, clk *clock, submit func(i int) error) (outcome, error) {
	m, err := startMeter(l.BrokerPID, l.Profile)
	if err != nil {
		return outcome{}, err
	}
	err = produce(ctx, l, clk, submit)
	if err == nil {
		await(ctx, l, clk)
	}
	cpu, cerr := m.settle()
	if err != nil {
		return outcome{}, err
	}
	if cerr != nil {
		return outcome{}, cerr
	}
	o, err := summarize(clk)
	o.CPU = cpu
	return o, err
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
// is set, with a plaintext store (nats-server's default) that is removed by
// the returned stop function.
func embedded(lazy, tcp bool) (*server.Server, func(...nats.Option) (*nats.Conn, error), func(), error) {
	return embeddedStore(lazy, tcp, "")
}

// benchStoreKey encrypts the store of the captchaq rows, as the shipped
// nats.conf does with CAPTCHAQ_STORE_KEY.
const benchStoreKey = "bench-store-key-0123456789abcdef0123456789"

// embeddedStore is embedded with the store encrypted at rest by key (none:
// plaintext).
func embeddedStore(lazy, tcp bool, key string) (*server.Server, func(...nats.Option) (*nats.Conn, error), func(), error) {
	dir, err := os.MkdirTemp("", "captchaq-bench-js-")
	if err != nil {
		return nil, nil, nil, err
	}
	ns, err := broker.Start(broker.Config{StoreDir: dir, LazySync: lazy, Listen: tcp, StoreKey: key})
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
	// The store's status, as `captchaq server` answers it: workers learn
	// from it whether the store is encrypted at rest.
	snc, err := connect(nats.Name("bench-store-status"))
	if err != nil {
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	g := broker.WatchStore(ns, broker.GuardConfig{})
	sub, err := stream.ServeStoreStatus(snc, func() stream.StoreStatus {
		st := g.Status()
		return stream.StoreStatus{At: st.At, Dir: st.Dir, MaxStore: st.MaxStore, Used: st.Used, Free: st.Free, Room: st.Room,
			Refusing: st.Refusing, Error: st.Error, Action: st.Action, Encrypted: broker.StoreEncrypted(ns)}
	})
	if err != nil {
		g.Stop()
		snc.Close()
		ns.Shutdown()
		os.RemoveAll(dir)
		return nil, nil, nil, err
	}
	stop := func() {
		_ = sub.Unsubscribe()
		g.Stop()
		snc.Close()
		ns.Shutdown()
		ns.WaitForShutdown()
		os.RemoveAll(dir)
	}
	return ns, connect, stop, nil
}

// runCaptchaq runs the load through captchaq: Client.Submit, a Worker with
// l.Threads threads and a no-op solver, on an encrypted store (the shipped
// default), or on a plaintext one, where workers erase each finished task's
// message by a rewrite of its block.
func runCaptchaq(ctx context.Context, l load, lazy, tcp, plaintext bool) (outcome, error) {
	key := benchStoreKey
	if plaintext {
		key = ""
	}
	_, connect, stop, err := embeddedStore(lazy, tcp, key)
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
	// The admin's part: producers and workers only find the topology.
	if _, err := stream.EnsureTopology(ctx, pnc, stream.Topology{}, true); err != nil {
		return outcome{}, err
	}
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
		ShutdownGrace:  time.Second,
		TokenLifetimes: tokenLifetimes(l.TokenLife),
	})
	if err != nil {
		return outcome{}, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()
	return measure(ctx, l, clk, func(i int) error {
		_, err := client.Submit(ctx, benchTask(i))
		return err
	})
}

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

// runRedisList runs the load through the design users build by hand on the
// redis-server at addr: RPUSH the task JSON; per thread BLPOP, handler, HSET the result,
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
	return measure(ctx, l, clk, func(i int) error {
		return rdb.RPush(ctx, queue, payloads[i]).Err()
	})
}

// runAsynq runs the load through hibiken/asynq on the redis-server at addr:
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
	return measure(ctx, l, clk, func(i int) error {
		_, err := client.EnqueueContext(ctx, asynq.NewTask("captcha:solve", payloads[i]))
		return err
	})
}

// probeRedis checks that the redis-server at addr persists as its rows say:
// with durable, an append-only file fsynced on every write (appendonly yes,
// appendfsync always); without, no append-only file and no snapshots
// (appendonly no, save ""). It returns the server's process id when that
// process runs on this host, so that its CPU time can be read, else 0.
func probeRedis(ctx context.Context, addr string, durable bool) (int, error) {
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	conf := map[string]string{}
	for _, key := range []string{"appendonly", "appendfsync", "save"} {
		v, err := rdb.ConfigGet(ctx, key).Result()
		if err != nil {
			return 0, fmt.Errorf("redis at %s: CONFIG GET %s: %w", addr, key, err)
		}
		conf[key] = v[key]
	}
	switch {
	case durable && (conf["appendonly"] != "yes" || conf["appendfsync"] != "always"):
		return 0, fmt.Errorf("redis at %s: appendonly %q, appendfsync %q; the durable rows need appendonly yes and appendfsync always", addr, conf["appendonly"], conf["appendfsync"])
	case !durable && (conf["appendonly"] != "no" || conf["save"] != ""):
		return 0, fmt.Errorf("redis at %s: appendonly %q, save %q; the no-persistence rows need appendonly no and save \"\"", addr, conf["appendonly"], conf["save"])
	}
	info, err := rdb.Info(ctx, "server").Result()
	if err != nil {
		return 0, fmt.Errorf("redis at %s: INFO server: %w", addr, err)
	}
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return 0, fmt.Errorf("redis address %q: %w", addr, err)
	}
	if ip := net.ParseIP(host); host != "localhost" && (ip == nil || !ip.IsLoopback()) {
		return 0, nil
	}
	for line := range strings.Lines(info) {
		v, ok := strings.CutPrefix(strings.TrimSpace(line), "process_id:")
		if !ok {
			continue
		}
		pid, err := strconv.Atoi(v)
		if err != nil {
			return 0, nil
		}
		// A server in another PID namespace (a container) has an id that
		// names some other process here, or none.
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || !strings.HasPrefix(string(comm), "redis-server") {
			return 0, nil
		}
		return pid, nil
	}
	return 0, nil
}

// tokenLifetimes is the workers' token lifetimes for a load: life for every
// method when positive, the product's defaults otherwise.
func tokenLifetimes(life time.Duration) map[string]time.Duration {
	if life <= 0 {
		return nil
	}
	out := map[string]time.Duration{}
	for m := range stream.DefaultTokenLifetimes {
		out[m] = life
	}
	return out
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"github.com/captchaq/captchaq/stream"
)

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

// Command captchaq-bench measures captchaq side by side with what its users
// would pick instead (bare JetStream, a hand-built Redis list, hibiken/asynq)
// on the same machine in the same run, and prints the results as markdown.
// bench/run.sh runs it and writes BENCHMARKS.md.
//
//	captchaq-bench [-quick] [-redis 127.0.0.1:6379] [-only broker,solver,scale,rss,atomic]
//
// Every scenario is bounded in tasks and time and talks only to 127.0.0.1 or
// in-process servers. The subcommands serve and worker are the subprocesses
// whose memory the scale scenarios read.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "serve":
			fs := flag.NewFlagSet("serve", flag.ExitOnError)
			dir := fs.String("store", "", "JetStream store directory")
			syncAlways := fs.Bool("sync-always", false, "fsync before every acknowledgement")
			pprofAddr := fs.String("pprof", "", "serve net/http/pprof on this address")
			_ = fs.Parse(os.Args[2:])
			exit(serveMain(ctx, *dir, !*syncAlways, *pprofAddr))
			return
		case "worker":
			fs := flag.NewFlagSet("worker", flag.ExitOnError)
			natsURL := fs.String("nats", "", "NATS URL")
			solverURL := fs.String("solver", "", "solving service base URL")
			threads := fs.Int("threads", 100, "threads")
			scale := fs.Float64("scale", 1, "timing scale")
			_ = fs.Parse(os.Args[2:])
			exit(workerMain(ctx, *natsURL, *solverURL, *threads, *scale))
			return
		}
	}
	quick := flag.Bool("quick", false, "a short smoke run (fewer tasks, shorter windows)")
	redisAddr := flag.String("redis", "", "host:port of a redis-server for the Redis-list and asynq rows (skipped when empty)")
	only := flag.String("only", "broker,solver,scale,rss,atomic", "scenarios to run, comma-separated")
	systems := flag.String("systems", "", "broker-bound: run only the systems whose name contains this")
	threadList := flag.String("threads", "1,8,64", "broker-bound: worker threads, comma-separated")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	serverProfiles := flag.String("server-profiles", "", "scale: write the nats-server's CPU profile of each dispatch measurement into this directory")
	noAnchor := flag.Bool("scale-no-anchor", false, "scale: delete the stream's anchor (captcha.anchor) before the backlog, to show dispatch without it")
	flag.Parse()
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		exit(err)
		exit(pprof.StartCPUProfile(f))
		defer pprof.StopCPUProfile()
	}
	var threads []int
	for _, s := range strings.Split(*threadList, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			exit(fmt.Errorf("-threads: %q is not a positive number", s))
		}
		threads = append(threads, n)
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))
	b := &bench{ctx: ctx, quick: *quick, redis: *redisAddr, log: log, filter: *systems, threads: threads, serverProfiles: *serverProfiles, noAnchor: *noAnchor}
	for _, s := range strings.Split(*only, ",") {
		var err error
		switch strings.TrimSpace(s) {
		case "broker":
			err = b.broker()
		case "solver":
			err = b.solverBound()
		case "scale":
			err = b.scale()
		case "rss":
			err = b.rss()
		case "atomic":
			err = b.atomicBatch()
		default:
			err = fmt.Errorf("unknown scenario %q", s)
		}
		if err != nil {
			pprof.StopCPUProfile()
			exit(fmt.Errorf("%s: %w", s, err))
		}
	}
}

func exit(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "captchaq-bench:", err)
		os.Exit(1)
	}
}

type bench struct {
	ctx   context.Context
	quick bool
	redis string
	log   *slog.Logger
	// filter and threads narrow the broker-bound scenario (profiling).
	filter  string
	threads []int
	// serverProfiles is where the scale scenario writes server CPU profiles.
	serverProfiles string
	// noAnchor deletes the scale scenario's stream anchor, to show the
	// dispatch latency without it (FINDINGS.md, "Scale: dispatch latency").
	noAnchor bool
}

func (b *bench) pick(quick, full int) int {
	if b.quick {
		return quick
	}
	return full
}

// system is one of the compared designs.
type system struct {
	name string
	run  func(context.Context, load) (outcome, error)
}

func (b *bench) systems() []system {
	out := []system{
		{"captchaq, LazySync, TCP", func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, true, true) }},
		{"captchaq, SyncAlways (default), TCP", func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, false, true) }},
		{"captchaq, LazySync, in-process", func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, true, false) }},
		{"bare JetStream (floor), LazySync, TCP", runFloor},
	}
	if b.redis != "" {
		out = append(out,
			system{"Redis list (RPUSH/BLPOP/HSET/PUBLISH)", func(ctx context.Context, l load) (outcome, error) { return runRedisList(ctx, l, b.redis) }},
			system{"hibiken/asynq", func(ctx context.Context, l load) (outcome, error) { return runAsynq(ctx, l, b.redis) }})
	}
	if b.filter != "" {
		out = slices.DeleteFunc(out, func(s system) bool { return !strings.Contains(s.name, b.filter) })
	}
	return out
}

func (b *bench) broker() error {
	tasks := b.pick(2000, 20000)
	syncTasks := b.pick(1000, 5000)
	paced, rate := b.pick(200, 1000), 500.0
	const producers = 4
	fmt.Printf("## 1. Broker-bound: no-op solver\n\n")
	fmt.Printf("Burst: %d tasks submitted by %d producer goroutines (one call per task: `Client.Submit`, `js.Publish`, `RPUSH`, `Enqueue`) while the workers run; "+
		"tasks/s = tasks ÷ (first submit → last completion). SyncAlways rows use %d tasks (fsync per write is slow). "+
		"Paced: %d tasks submitted at a steady %.0f/s by one producer, so the latency is dispatch, not backlog. "+
		"Latency is submit (stamped just before the publish call) → the solver or handler being called.\n\n",
		tasks, producers, syncTasks, paced, rate)
	type row struct {
		sys            string
		threads        int
		burst, pace    outcome
		burstErr, pErr error
	}
	var rows []row
	for _, threads := range b.threads {
		for _, s := range b.systems() {
			n := tasks
			if strings.Contains(s.name, "SyncAlways") {
				n = syncTasks
			}
			r := row{sys: s.name, threads: threads}
			b.log.Info("broker-bound", slog.String("system", s.name), slog.Int("threads", threads), slog.Int("tasks", n))
			r.burst, r.burstErr = s.run(b.ctx, load{Tasks: n, Threads: threads, Producers: producers, Timeout: 5 * time.Minute})
			r.pace, r.pErr = s.run(b.ctx, load{Tasks: paced, Threads: threads, Rate: rate, Timeout: time.Minute})
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			rows = append(rows, r)
		}
	}
	t := table{head: []string{"threads", "system", "tasks/s (burst)", "burst p50 / p99", "paced p50 / p99", "captchaq LazySync TCP ÷ this"}}
	var headline table
	headline.head = []string{"threads", "captchaq ÷ floor", "captchaq ÷ Redis list", "captchaq ÷ asynq", "SyncAlways ÷ LazySync"}
	for _, threads := range b.threads {
		var ref float64
		ratios := map[string]string{}
		for _, r := range rows {
			if r.threads == threads && strings.HasPrefix(r.sys, "captchaq, LazySync, TCP") && r.burstErr == nil {
				ref = r.burst.rate()
			}
		}
		for _, r := range rows {
			if r.threads != threads {
				continue
			}
			cells := []string{fmt.Sprint(threads), r.sys}
			if r.burstErr != nil {
				cells = append(cells, "failed: "+r.burstErr.Error(), "", "")
			} else {
				cells = append(cells, fmt.Sprintf("%.0f", r.burst.rate()), ms(r.burst.P50)+" / "+ms(r.burst.P99))
			}
			if r.pErr != nil {
				cells = append(cells, "failed: "+r.pErr.Error())
			} else {
				cells = append(cells, ms(r.pace.P50)+" / "+ms(r.pace.P99))
			}
			ratio := ""
			if ref > 0 && r.burstErr == nil {
				ratio = fmt.Sprintf("%.2f×", ref/r.burst.rate())
				ratios[r.sys] = ratio
			}
			cells = append(cells, ratio)
			t.add(cells...)
		}
		var syncRatio string
		for _, r := range rows {
			if r.threads == threads && strings.Contains(r.sys, "SyncAlways") && r.burstErr == nil && ref > 0 {
				syncRatio = fmt.Sprintf("%.2f×", r.burst.rate()/ref)
			}
		}
		headline.add(fmt.Sprint(threads), ratios["bare JetStream (floor), LazySync, TCP"], ratios["Redis list (RPUSH/BLPOP/HSET/PUBLISH)"], ratios["hibiken/asynq"], syncRatio)
	}
	fmt.Printf("Headline ratios (captchaq with LazySync over TCP, the fair match for Redis without fsync; tasks/s ÷ tasks/s, burst):\n\n%s\n", headline.String())
	fmt.Printf("All rows:\n\n%s\n", t.String())
	return nil
}

func (b *bench) scale() error {
	depths := []int{1000, 100000, 1000000}
	if b.quick {
		depths = []int{1000, 10000, 50000}
	}
	probes, rate := b.pick(100, 500), 100.0
	fmt.Printf("## 3. Scale: queue depth\n\n")
	fmt.Printf("A fresh nats-server subprocess (LazySync, file store) per depth, filled with that many normal-priority Turnstile tasks by 8 producer goroutines calling `Client.Submit` over TCP "+
		"(no worker running). Then, twice on the same server, an 8-thread worker starts and %d high-priority tasks are submitted at %.0f/s: "+
		"dispatch latency is their submit → solver call. First with the backlog held back (the fast lane's normal-priority consumer capped at 1 task in solving by `Topology.LaneLimits`, "+
		"each backlog solve taking 50 ms, so under 20 backlog tasks/s and a nearly idle CPU: what the depth itself costs), "+
		"then with the cap lifted and the 8 no-op threads draining the backlog as fast as the 2 cores allow. RSS is the server process's VmRSS.\n\n", probes, rate)
	if b.noAnchor {
		fmt.Printf("With `-scale-no-anchor`: the stream's anchor (`captcha.anchor`, `Nats-TTL: never`) is deleted before the backlog is stored, so the stream's first sequence catches up with the consumers as the backlog drains " +
			"and nats-server scans every queued task subject on nearly every delivery: the behaviour before captchaq stored the anchor.\n\n")
	} else {
		fmt.Printf("The stream holds its anchor (`captcha.anchor`, `Nats-TTL: never`, stored by whoever creates the stream: here `stream.NewClient`), so its first sequence stays below every consumer's position; `-scale-no-anchor` shows the latency without it.\n\n")
	}
	t := table{head: []string{"queued", "submit /s (all)", "submit /s (last 10 %)", "dispatch p50 / p99", "dispatch mean", "backlog drained /s meanwhile", "server RSS filled", "server RSS after", "server peak RSS", "store on disk"}}
	dt := table{head: []string{"queued", "backlog drain", "dispatch p50 / p99 / max", "dispatch mean", "backlog drained /s", "CPU used (server + bench), cores"}}
	for _, d := range depths {
		b.log.Info("scale", slog.Int("depth", d))
		r, err := runDepth(b.ctx, d, probes, rate, b.noAnchor, b.serverProfiles)
		if err != nil {
			return err
		}
		full := r.Phases[len(r.Phases)-1]
		t.add(fmt.Sprint(d), fmt.Sprintf("%.0f", r.SubmitRate), fmt.Sprintf("%.0f", r.TailRate), ms(full.P50)+" / "+ms(full.P99), ms(full.Mean),
			fmt.Sprintf("%.0f", float64(full.Drained)/full.Seconds), mib(r.RSSFilled), mib(r.RSSAfter), mib(r.HWM), mib(r.Disk))
		for _, p := range r.Phases {
			dt.add(fmt.Sprint(d), p.Drain.name, ms(p.P50)+" / "+ms(p.P99)+" / "+ms(p.Max), ms(p.Mean), fmt.Sprintf("%.0f", float64(p.Drained)/p.Seconds),
				fmt.Sprintf("%.2f + %.2f", p.ServerCPU.Seconds()/p.Seconds, p.Self.Seconds()/p.Seconds))
		}
		runtime.GC()
	}
	fmt.Printf("%s\n", t.String())
	fmt.Printf("Dispatch latency by how fast the backlog drains meanwhile (the full-speed rows are the ones above):\n\n%s\n", dt.String())
	return nil
}

func (b *bench) rss() error {
	fmt.Printf("## 4. Worker memory at 100 concurrent solves\n\n")
	fmt.Printf("A worker subprocess (`captchaq-bench worker`: `stream.NewWorker` + `solver.NewClient`, Threads 100) against the emulator over HTTP (60-s reCAPTCHA solves, time scale 0.1, no plan cap); " +
		"100 reCAPTCHA tasks submitted; RSS read once the emulator counts 100 captchas in solving at once.\n\n")
	r, err := runWorkerRSS(b.ctx, 100)
	if err != nil {
		return err
	}
	t := table{head: []string{"threads", "captchas in solving", "worker RSS idle", "worker RSS at 100 solves", "worker peak RSS"}}
	t.add(fmt.Sprint(r.Threads), fmt.Sprint(r.Concurrent), mib(r.Idle), mib(r.Busy), mib(r.Peak))
	fmt.Printf("%s\n", t.String())
	return nil
}

// Command captchaq-bench measures captchaq side by side with what its users
// would pick instead (bare JetStream, a hand-built Redis list, hibiken/asynq)
// on the same machine in the same run, and prints the results as markdown.
// bench/run.sh runs it and writes BENCHMARKS.md.
//
//	captchaq-bench [-quick] [-redis 127.0.0.1:6379] [-redis-durable 127.0.0.1:6380]
//	               [-only broker,solver,ttt,burst,scale,rss,atomic,jit] [-burst-runs N] [-profile-dir DIR]
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
			plaintext := fs.Bool("plaintext", false, "leave the store unencrypted (workers then erase each finished task by a rewrite of its block)")
			_ = fs.Parse(os.Args[2:])
			key := benchStoreKey
			if *plaintext {
				key = ""
			}
			exit(serveMain(ctx, *dir, !*syncAlways, key, *pprofAddr))
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
	redisAddr := flag.String("redis", "", "host:port of a redis-server without persistence (appendonly no, save \"\") for the Redis-list and asynq rows (skipped when empty)")
	redisDurable := flag.String("redis-durable", "", "host:port of a redis-server with appendonly yes, appendfsync always for the durable Redis-list and asynq rows (skipped when empty)")
	only := flag.String("only", "broker,solver,ttt,burst,scale,rss,atomic,jit", "scenarios to run, comma-separated")
	systems := flag.String("systems", "", "broker-bound systems and solver-bound scenarios: run only those whose name contains this (several: a|b; =name: exactly that name)")
	threadList := flag.String("threads", "1,8,64", "broker-bound: worker threads, comma-separated")
	cpuProfile := flag.String("cpuprofile", "", "write a CPU profile of the whole run to this file")
	profileDir := flag.String("profile-dir", "", "broker-bound: write a CPU profile of each captchaq and floor burst (this process, the embedded nats-server included) into this directory")
	serverProfiles := flag.String("server-profiles", "", "scale: write the nats-server's CPU profile of each dispatch measurement into this directory")
	solverWindow := flag.Duration("solver-window", 0, "solver-bound: the measured window of wall clock (0: 30 s, 10 s with -quick; at time scale 0.1 a second is ten of real time); longer, plan used counts more solves and wavers less")
	tokenLife := flag.Duration("token-lifetime", 0, "broker-bound: captchaq's token lifetime for every method (0: the product's defaults); short, a burst pays what a token's expiry costs")
	scalePlaintext := flag.Bool("scale-plaintext", false, "scale: an unencrypted store (a nats-server of the user's own without a key), where workers erase each finished task by a rewrite of its block")
	noAnchor := flag.Bool("scale-no-anchor", false, "scale: delete the stream's anchor (captcha.anchor) before the backlog, to show dispatch without it")
	burstRuns := flag.Int("burst-runs", 1, "burst: runs of each row")
	burstScaleFlag := flag.Float64("burst-scale", burstScale, "burst: the time scale (1: real solve times, poll schedule and spacing)")
	flag.Parse()
	if *cpuProfile != "" && *profileDir != "" {
		exit(fmt.Errorf("-cpuprofile and -profile-dir both start the process's CPU profile: give one"))
	}
	if *profileDir != "" {
		exit(os.MkdirAll(*profileDir, 0o755))
	}
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
	b := &bench{ctx: ctx, quick: *quick, redis: *redisAddr, redisDurable: *redisDurable, log: log, filter: *systems, threads: threads,
		profileDir: *profileDir, serverProfiles: *serverProfiles, noAnchor: *noAnchor, plaintext: *scalePlaintext, tokenLife: *tokenLife,
		solverWindow: *solverWindow, burstRuns: *burstRuns, burstScale: *burstScaleFlag}
	for _, s := range strings.Split(*only, ",") {
		var err error
		switch strings.TrimSpace(s) {
		case "broker":
			err = b.broker()
		case "solver":
			err = b.solverBound()
		case "ttt":
			err = b.timeToToken()
		case "burst":
			err = b.burst()
		case "scale":
			err = b.scale()
		case "rss":
			err = b.rss()
		case "atomic":
			err = b.atomicBatch()
		case "jit":
			err = b.jit()
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
	// redis and redisDurable are the redis-servers of the Redis rows:
	// without persistence, and with appendfsync always.
	redis, redisDurable string
	log                 *slog.Logger
	// filter and threads narrow the broker-bound scenario (profiling).
	filter  string
	threads []int
	// profileDir is where the broker-bound scenario writes CPU profiles.
	profileDir string
	// serverProfiles is where the scale scenario writes server CPU profiles.
	serverProfiles string
	// noAnchor deletes the scale scenario's stream anchor, to show the
	// dispatch latency without it (FINDINGS.md, "Scale: dispatch latency").
	noAnchor bool
	// plaintext runs the scale scenario's server without a store key.
	plaintext bool
	// tokenLife is captchaq's token lifetime in broker-bound bursts (0: the defaults).
	tokenLife time.Duration
	// solverWindow is the solver-bound scenario's measured window of wall
	// clock (0: the default).
	solverWindow time.Duration
	// burstRuns is how many times the burst scenario runs each row.
	burstRuns int
	// burstScale is the burst scenario's time scale (-burst-scale).
	burstScale float64
}

func (b *bench) pick(quick, full int) int {
	if b.quick {
		return quick
	}
	return full
}

func (b *bench) scale() error {
	depths := []int{1000, 100000, 1000000}
	if b.quick {
		depths = []int{1000, 10000, 50000}
	}
	probes, rate := b.pick(100, 500), 100.0
	fmt.Printf("## 3. Scale: queue depth\n\n")
	store := "encrypted at rest, as `captchaq server` keeps it by default, its status answered as the server does"
	if b.plaintext {
		store = "unencrypted (`-scale-plaintext`: a nats-server of the user's own without a key), so workers erase each finished task by a rewrite of its block"
	}
	fmt.Printf("A fresh nats-server subprocess (LazySync, file store %s) per depth, filled with that many normal-priority Turnstile tasks by 8 producer goroutines calling `Client.Submit` over TCP "+
		"(no worker running). Then, twice on the same server, an 8-thread worker starts and %d high-priority tasks are submitted at %.0f/s: "+
		"dispatch latency is their submit → solver call. First with the backlog held back (the fast lane's normal-priority consumer capped at 1 task in solving by `Topology.LaneLimits`, "+
		"each backlog solve taking 50 ms, so under 20 backlog tasks/s and a nearly idle CPU: what the depth itself costs), "+
		"then with the cap lifted and the 8 no-op threads draining the backlog as fast as the 2 cores allow. RSS is the server process's VmRSS.\n\n", store, probes, rate)
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
		r, err := runDepth(b.ctx, d, probes, rate, b.noAnchor, b.plaintext, b.serverProfiles)
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

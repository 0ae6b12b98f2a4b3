package main

import (
	"context"
	"fmt"
	"log/slog"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Keys of the broker-bound systems: what the report's ratios look rows up by
// and what the profile files are named after.
const (
	keyLazy      = "captchaq-lazysync-tcp"
	keySync      = "captchaq-syncalways-tcp"
	keyInProcess = "captchaq-lazysync-inprocess"
	keyFloor     = "floor"
	// keyFloorExchanges is the floor making captchaq's exchanges per task.
	keyFloorExchanges     = "floor-captchaq-exchanges"
	keyFloorSync          = "floor-syncalways"
	keyFloorExchangesSync = "floor-captchaq-exchanges-syncalways"
	keyList               = "redis-list"
	keyLazyPlain          = "captchaq-lazysync-plaintext"
	keySyncPlain          = "captchaq-syncalways-plaintext"
	keyAsynq              = "asynq"
	keyListAlways         = "redis-list-appendfsync-always"
	keyAsynqAlways        = "asynq-appendfsync-always"
)

// system is one of the compared designs.
type system struct {
	key  string
	name string
	// durable: every write waits for an fsync, so the row runs the durable
	// task count, the same for every durable row so that they compare.
	durable bool
	// profiled: with -profile-dir, each burst of the row writes a CPU
	// profile of this process (which embeds the row's nats-server).
	profiled bool
	// external: the broker is a process of its own (a redis-server), whose
	// CPU time counts when brokerPID is set (0: not on this host).
	external  bool
	brokerPID int
	run       func(context.Context, load) (outcome, error)
}

// selected reports whether -systems picks the system or scenario called
// name: every one when it is empty; else one that contains one of its
// |-separated parts, or is exactly a part that starts with "=".
func (b *bench) selected(name string) bool {
	if b.filter == "" {
		return true
	}
	return slices.ContainsFunc(strings.Split(b.filter, "|"), func(f string) bool {
		if exact, ok := strings.CutPrefix(f, "="); ok {
			return name == exact
		}
		return strings.Contains(name, f)
	})
}

// systems returns the systems the run compares, after checking that each
// redis-server given persists as its rows say.
func (b *bench) systems() ([]system, error) {
	out := []system{
		{key: keyLazy, name: "captchaq, LazySync, TCP", profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, true, true, false) }},
		{key: keySync, name: "captchaq, SyncAlways (default), TCP", durable: true, profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, false, true, false) }},
		{key: keyInProcess, name: "captchaq, LazySync, in-process", profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, true, false, false) }},
		// The store without encryption at rest: workers erase each finished
		// task's message (a block rewrite), to show what encryption saves.
		{key: keyLazyPlain, name: "captchaq, LazySync, TCP, plaintext store (erasure by block rewrite)", profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, true, true, true) }},
		{key: keySyncPlain, name: "captchaq, SyncAlways, TCP, plaintext store (erasure by block rewrite)", durable: true, profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runCaptchaq(ctx, l, false, true, true) }},
		{key: keyFloor, name: "bare JetStream (floor), LazySync, TCP", profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runFloor(ctx, l, true) }},
		// What captchaq's guarantees cost in exchanges alone, with none of
		// its code: the floor plus the reads and writes captchaq makes per
		// task, on an encrypted store.
		{key: keyFloorExchanges, name: "bare JetStream doing captchaq's exchanges (cancel read, 3 stored writes, ack, delete), LazySync, TCP, encrypted", profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runFloorExchanges(ctx, l, true) }},
		{key: keyFloorSync, name: "bare JetStream (floor), SyncAlways, TCP", durable: true, profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runFloor(ctx, l, false) }},
		{key: keyFloorExchangesSync, name: "bare JetStream doing captchaq's exchanges, SyncAlways, TCP, encrypted", durable: true, profiled: true,
			run: func(ctx context.Context, l load) (outcome, error) { return runFloorExchanges(ctx, l, false) }},
	}
	for _, r := range []struct {
		addr, list, asynq string
		durable           bool
	}{
		{b.redis, keyList, keyAsynq, false},
		{b.redisDurable, keyListAlways, keyAsynqAlways, true},
	} {
		if r.addr == "" {
			continue
		}
		pid, err := probeRedis(b.ctx, r.addr, r.durable)
		if err != nil {
			return nil, err
		}
		out = append(out, redisSystems(r.addr, r.list, r.asynq, r.durable, pid)...)
	}
	if b.filter != "" {
		out = slices.DeleteFunc(out, func(s system) bool { return !b.selected(s.name) })
	}
	return out, nil
}

// redisSystems are the two systems on the redis-server at addr, with the
// process id pid: a plain Redis list and hibiken/asynq, with or without
// appendfsync always (durable).
func redisSystems(addr, listKey, asynqKey string, durable bool, pid int) []system {
	persistence := "no persistence"
	if durable {
		persistence = "appendfsync always"
	}
	listName := "Redis list (RPUSH/BLPOP/HSET/PUBLISH), " + persistence
	if durable {
		listName = "Redis list, " + persistence
	}
	return []system{
		{key: listKey, name: listName, durable: durable, external: true, brokerPID: pid,
			run: func(ctx context.Context, l load) (outcome, error) { return runRedisList(ctx, l, addr) }},
		{key: asynqKey, name: "hibiken/asynq, " + persistence, durable: durable, external: true, brokerPID: pid,
			run: func(ctx context.Context, l load) (outcome, error) { return runAsynq(ctx, l, addr) }},
	}
}

// brokerRow is one system at one thread count: its burst and its paced run.
type brokerRow struct {
	sys               system
	threads           int
	burst, pace       outcome
	burstErr, paceErr error
}

// brokerRows are the rows of one broker-bound run.
type brokerRows []brokerRow

func (rs brokerRows) find(threads int, key string) *brokerRow {
	for i := range rs {
		if rs[i].threads == threads && rs[i].sys.key == key {
			return &rs[i]
		}
	}
	return nil
}

// rateRatio is a's burst tasks/s ÷ b's, if both bursts completed.
func (rs brokerRows) rateRatio(threads int, a, b string) (float64, bool) {
	ra, rb := rs.find(threads, a), rs.find(threads, b)
	if ra == nil || rb == nil || ra.burstErr != nil || rb.burstErr != nil {
		return 0, false
	}
	return ra.burst.rate() / rb.burst.rate(), true
}

// cpuRatio is a's burst CPU per task ÷ b's, if both were measured; settled
// is false when either run's processes were still busy at the cut-off.
func (rs brokerRows) cpuRatio(threads int, a, b string) (ratio float64, settled, ok bool) {
	ra, rb := rs.find(threads, a), rs.find(threads, b)
	if ra == nil || rb == nil || ra.burstErr != nil || rb.burstErr != nil || !ra.cpuMeasured() || !rb.cpuMeasured() || rb.burst.cpuPerTask() == 0 {
		return 0, false, false
	}
	return float64(ra.burst.cpuPerTask()) / float64(rb.burst.cpuPerTask()), ra.burst.CPU.Settled && rb.burst.CPU.Settled, true
}

// cpuMeasured says whether the burst's CPU covers the broker too.
func (r *brokerRow) cpuMeasured() bool { return !r.sys.external || r.burst.CPU.Broker }

func (r *brokerRow) cpuCell() string {
	if r.burstErr != nil {
		return ""
	}
	if !r.cpuMeasured() {
		return "n/a (broker not on this host)"
	}
	v := fmt.Sprintf("%.0f", float64(r.burst.cpuPerTask())/float64(time.Microsecond))
	if !r.burst.CPU.Settled {
		v = "≥ " + v
	}
	return v
}

func ratioCell(v float64, ok bool) string {
	if !ok {
		return ""
	}
	return fmt.Sprintf("%.2f×", v)
}

func (b *bench) broker() error {
	tasks := b.pick(2000, 20000)
	durableTasks := b.pick(1000, 5000)
	paced, rate := b.pick(200, 1000), 500.0
	const producers = 4
	systems, err := b.systems()
	if err != nil {
		return err
	}
	fmt.Printf("## 1. Broker-bound: no-op solver\n\n")
	fmt.Printf("Burst: %d tasks submitted by %d producer goroutines (one call per task: `Client.Submit`, `js.Publish`, `RPUSH`, `Enqueue`) while the workers run; "+
		"tasks/s = tasks ÷ (first submit → last completion). Durable rows (captchaq SyncAlways, Redis with `appendfsync always`) use %d tasks each (an fsync per write is slow), so they compare with one another. "+
		"Paced: %d tasks submitted at a steady %.0f/s by one producer, so the latency is dispatch, not backlog. "+
		"Latency is submit (stamped just before the publish call) → the solver or handler being called.\n\n",
		tasks, producers, durableTasks, paced, rate)
	fmt.Printf("CPU µs/task (burst): user + system CPU time of the bench process (producers, workers, and the embedded nats-server of the JetStream rows) "+
		"plus, for the Redis rows, the redis-server's process (`/proc/<pid>/stat`, 10-ms ticks), from just before the first submit until they went quiet after the last completion "+
		"(a %d-ms window using at most %d ms of CPU, or %d s at most: `≥` marks a run still busy then), ÷ tasks. "+
		"Redis rows without persistence run on a redis-server with `appendonly no` and `save \"\"`; the `appendfsync always` rows on a second one with `appendonly yes` and `appendfsync always` (both checked with `CONFIG GET` before the runs).\n\n",
		settleWindow.Milliseconds(), settleIdle.Milliseconds(), int(settleMax.Seconds()))
	if b.profileDir != "" {
		fmt.Printf("With `-profile-dir`: every captchaq and floor burst wrote a CPU profile of the bench process to `%s/<system>-<threads>threads.pprof`; those rows pay the profiler's few per cent.\n\n", b.profileDir)
	}
	var rows brokerRows
	for _, threads := range b.threads {
		for _, s := range systems {
			n := tasks
			if s.durable {
				n = durableTasks
			}
			r := brokerRow{sys: s, threads: threads}
			burst := load{Tasks: n, Threads: threads, Producers: producers, Timeout: 5 * time.Minute, BrokerPID: s.brokerPID, TokenLife: b.tokenLife}
			if b.profileDir != "" && s.profiled {
				burst.Profile = filepath.Join(b.profileDir, fmt.Sprintf("%s-%dthreads.pprof", s.key, threads))
			}
			b.log.Info("broker-bound", slog.String("system", s.name), slog.Int("threads", threads), slog.Int("tasks", n))
			r.burst, r.burstErr = s.run(b.ctx, burst)
			r.pace, r.paceErr = s.run(b.ctx, load{Tasks: paced, Threads: threads, Rate: rate, Timeout: time.Minute, BrokerPID: s.brokerPID})
			if b.ctx.Err() != nil {
				return b.ctx.Err()
			}
			rows = append(rows, r)
		}
	}
	headline := table{head: []string{"threads", "captchaq ÷ floor", "captchaq ÷ Redis list", "captchaq ÷ asynq",
		"SyncAlways ÷ LazySync", "SyncAlways ÷ Redis list, appendfsync always", "SyncAlways ÷ asynq, appendfsync always", "CPU/task: captchaq ÷ floor"}}
	for _, threads := range b.threads {
		cells := []string{fmt.Sprint(threads)}
		for _, pair := range [][2]string{{keyLazy, keyFloor}, {keyLazy, keyList}, {keyLazy, keyAsynq}, {keySync, keyLazy}, {keySync, keyListAlways}, {keySync, keyAsynqAlways}} {
			cells = append(cells, ratioCell(rows.rateRatio(threads, pair[0], pair[1])))
		}
		v, settled, ok := rows.cpuRatio(threads, keyLazy, keyFloor)
		c := ratioCell(v, ok)
		if ok && !settled {
			c += " (not settled)"
		}
		headline.add(append(cells, c)...)
	}
	fmt.Printf("Headline ratios (tasks/s ÷ tasks/s, burst; \"captchaq\" is LazySync over TCP, the fair match for Redis without fsync, and SyncAlways, captchaq's default, the match for Redis with `appendfsync always`; "+
		"CPU/task ÷ CPU/task, burst):\n\n%s\n", headline.String())
	fmt.Printf("%s\n", rows.targets(b.threads))
	if ex := rows.exchanges(b.threads); ex != "" {
		fmt.Printf("What the exchanges alone cost: bare JetStream making, per task, the reads and writes captchaq's guarantees take for a first delivery that succeeds (the direct read of the task's cancel record, "+
			"the attempt event, the token in a memory stream, the outcome, each a synchronous publish, the two records compare-and-set; the ack; the delete, one at a time beside the threads), "+
			"on an encrypted store, with none of captchaq's code: the same targets held against it.\n\n%s\n", ex)
	}
	t := table{head: []string{"threads", "system", "tasks/s (burst)", "CPU µs/task (burst)", "burst p50 / p99", "paced p50 / p99", "captchaq LazySync TCP ÷ this"}}
	for _, r := range rows {
		cells := []string{fmt.Sprint(r.threads), r.sys.name}
		if r.burstErr != nil {
			cells = append(cells, "failed: "+r.burstErr.Error(), "", "")
		} else {
			cells = append(cells, fmt.Sprintf("%.0f", r.burst.rate()), r.cpuCell(), ms(r.burst.P50)+" / "+ms(r.burst.P99))
		}
		if r.paceErr != nil {
			cells = append(cells, "failed: "+r.paceErr.Error())
		} else {
			cells = append(cells, ms(r.pace.P50)+" / "+ms(r.pace.P99))
		}
		ratio, ok := rows.rateRatio(r.threads, keyLazy, r.sys.key)
		t.add(append(cells, ratioCell(ratio, ok))...)
	}
	fmt.Printf("All rows:\n\n%s\n", t.String())
	return nil
}

// exchanges is the table that holds the broker-cost targets against the
// floor doing captchaq's exchanges, and captchaq against that row; empty
// when the run did not measure it.
func (rs brokerRows) exchanges(threads []int) string {
	t := table{head: []string{"threads", "exchanges ÷ floor", "exchanges ÷ asynq", "exchanges ÷ Redis list", "exchanges, SyncAlways ÷ asynq, appendfsync always",
		"CPU/task: exchanges ÷ floor", "paced p50 (exchanges)", "captchaq ÷ exchanges", "captchaq SyncAlways ÷ exchanges SyncAlways", "CPU/task: captchaq ÷ exchanges"}}
	for _, n := range threads {
		ex := rs.find(n, keyFloorExchanges)
		if ex == nil {
			continue
		}
		cells := []string{fmt.Sprint(n)}
		for _, pair := range [][2]string{{keyFloorExchanges, keyFloor}, {keyFloorExchanges, keyAsynq}, {keyFloorExchanges, keyList}, {keyFloorExchangesSync, keyAsynqAlways}} {
			cells = append(cells, ratioCell(rs.rateRatio(n, pair[0], pair[1])))
		}
		v, _, ok := rs.cpuRatio(n, keyFloorExchanges, keyFloor)
		cells = append(cells, ratioCell(v, ok))
		if ex.paceErr == nil {
			cells = append(cells, ms(ex.pace.P50))
		} else {
			cells = append(cells, "")
		}
		for _, pair := range [][2]string{{keyLazy, keyFloorExchanges}, {keySync, keyFloorExchangesSync}} {
			cells = append(cells, ratioCell(rs.rateRatio(n, pair[0], pair[1])))
		}
		v, _, ok = rs.cpuRatio(n, keyLazy, keyFloorExchanges)
		t.add(append(cells, ratioCell(v, ok))...)
	}
	if len(t.rows) == 0 {
		return ""
	}
	return t.String()
}

// targetThreads are the thread counts the broker-cost targets are stated at.
var targetThreads = []int{8, 64}

// target is one of the broker-cost targets for the broker-bound rows.
type target struct {
	name string // what is measured
	want string // the target, as the issue states it
	// measure returns the measured value, its cell, whether the value is
	// exact (false: CPU still busy at the cut-off), and whether it was
	// measured at all.
	measure func(rs brokerRows, threads int) (v float64, cell string, exact, ok bool)
	met     func(v float64) bool
}

func rateTarget(name, want, a, b string, least float64) target {
	return target{name: name, want: want,
		measure: func(rs brokerRows, threads int) (float64, string, bool, bool) {
			v, ok := rs.rateRatio(threads, a, b)
			return v, ratioCell(v, ok), true, ok
		},
		met: func(v float64) bool { return v >= least }}
}

var targets = []target{
	rateTarget("captchaq LazySync ÷ hibiken/asynq (no persistence), tasks/s", "≥ 1.20×", keyLazy, keyAsynq, 1.2),
	rateTarget("captchaq LazySync ÷ Redis list (no persistence), tasks/s", "≥ 0.70×", keyLazy, keyList, 0.7),
	rateTarget("captchaq SyncAlways (default) ÷ hibiken/asynq, appendfsync always, tasks/s", "≥ 0.90×", keySync, keyAsynqAlways, 0.9),
	{name: "CPU per task: captchaq LazySync ÷ bare JetStream floor", want: "≤ 2.50×",
		measure: func(rs brokerRows, threads int) (float64, string, bool, bool) {
			v, settled, ok := rs.cpuRatio(threads, keyLazy, keyFloor)
			return v, ratioCell(v, ok), settled, ok
		},
		met: func(v float64) bool { return v <= 2.5 }},
	{name: "paced pickup p50, captchaq LazySync, TCP", want: "≤ 0.60 ms",
		measure: func(rs brokerRows, threads int) (float64, string, bool, bool) {
			r := rs.find(threads, keyLazy)
			if r == nil || r.paceErr != nil {
				return 0, "", true, false
			}
			return float64(r.pace.P50) / float64(time.Millisecond), ms(r.pace.P50), true, true
		},
		met: func(v float64) bool { return v <= 0.6 }},
}

// targets is the table of the broker-cost targets at the thread counts they name
// that this run measured: target, measured, met.
func (rs brokerRows) targets(threads []int) string {
	t := table{head: []string{"threads", "target", "wanted", "measured", "met?"}}
	for _, n := range targetThreads {
		if !slices.Contains(threads, n) {
			continue
		}
		for _, tg := range targets {
			v, cell, exact, ok := tg.measure(rs, n)
			met := "—"
			switch {
			case !ok:
				cell = "not measured"
			case !exact:
				cell += " (not settled)"
				met = "?"
			case tg.met(v):
				met = "yes"
			default:
				met = "**no**"
			}
			t.add(fmt.Sprint(n), tg.name, tg.want, cell, met)
		}
	}
	if len(t.rows) == 0 {
		return fmt.Sprintf("Issue 15's targets are stated at %v threads; this run measured neither.\n", targetThreads)
	}
	return "Issue 15's targets (at 8 and 64 threads, burst unless paced):\n\n" + t.String()
}

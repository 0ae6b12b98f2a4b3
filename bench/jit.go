package main

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// The just-in-time row: tasks that say when their token is used (use_at),
// solved by captchaq just in time, against a producer that submits each
// task by hand a minute before its use.

// jitResult is one way of timing n tasks: how many tokens arrived before
// use_at, and what share of their lifetime they had left then.
type jitResult struct {
	n, solved, before int
	// lifeLeft are the shares of the lifetime left at use_at of the tokens
	// that arrived before it.
	lifeLeft []float64
	// recaptchaLeft are lifeLeft of the reCAPTCHA tokens (120 s).
	recaptchaLeft []float64
	// secsLeft are the same in seconds of real time.
	secsLeft []float64
	// earlyBy are how long before use_at those tokens arrived (real time).
	earlyBy []time.Duration
	inCalls int
}

func (b *bench) jit() error {
	const scale = 0.1
	n, spread := b.pick(60, 200), 10*time.Minute
	fmt.Printf("## Tokens just in time\n\n")
	fmt.Printf("%d mixed tasks (reCAPTCHA v2 solved in 15–60 s, Turnstile 5–15 s, an image 2–8 s, uniform; token lifetimes 120 s, 300 s and 300 s), "+
		"each with a use_at drawn uniformly from 1 to %s after the start; a plan of 20 threads at the emulator (CaptchaAI), "+
		"two workers of 10 threads with their flags at their defaults (timings shared every 30 s); time scale %.2f, token lifetimes scaled too. "+
		"Each row runs on a fresh pool warmed by 30 plain tasks (10 answers of each kind). "+
		"*captchaq* submits every task at once with its use_at; *by hand* submits each task without one at use_at − 60 s. "+
		"Lifetime left is at use_at, of the tokens that arrived before it.\n\n", n, spread+time.Minute, scale)
	t := table{head: []string{"way", "tasks", "solved", "before use_at", "median lifetime left", "p10 lifetime left", "reCAPTCHA: median / p10 lifetime left", "median arrival before use_at", "in.php calls"}}
	for _, way := range []string{"captchaq (`use_at`)", "by hand (submit at use_at − 60 s)"} {
		if !b.selected(way) {
			continue
		}
		b.log.Info("just in time", slog.String("way", way))
		r, err := runJIT(b.ctx, scale, n, spread, way != "captchaq (`use_at`)")
		if err != nil {
			return fmt.Errorf("%s: %w", way, err)
		}
		t.add(way, fmt.Sprint(r.n), fmt.Sprint(r.solved), fmt.Sprintf("%.1f %%", 100*float64(r.before)/float64(r.n)),
			fmt.Sprintf("%.0f %% (%.0f s)", 100*quantile(r.lifeLeft, 0.5), quantile(r.secsLeft, 0.5)),
			fmt.Sprintf("%.0f %%", 100*quantile(r.lifeLeft, 0.1)),
			fmt.Sprintf("%.0f %% / %.0f %%", 100*quantile(r.recaptchaLeft, 0.5), 100*quantile(r.recaptchaLeft, 0.1)),
			ms(time.Duration(quantile(durs(r.earlyBy), 0.5))), fmt.Sprint(r.inCalls))
	}
	fmt.Printf("%s\n", t.String())
	return nil
}

func durs(ds []time.Duration) []float64 {
	out := make([]float64, len(ds))
	for i, d := range ds {
		out[i] = float64(d)
	}
	return out
}

// quantile is the q-quantile of xs (nearest rank), 0 when empty.
func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// runJIT runs n mixed tasks whose use_at is spread over spread, one minute
// on, at time scale scale: with use_at (captchaq times them), or byHand,
// each submitted without it a minute before its use.
func runJIT(ctx context.Context, scale float64, n int, spread time.Duration, byHand bool) (jitResult, error) {
	res := jitResult{n: n}
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	sc := workerDefaults
	sc.name, sc.plan, sc.workers, sc.threads = "jit", 20, 2, 10
	p, err := startPool(ctx, sc, scale)
	if err != nil {
		return res, err
	}
	defer p.stop()
	lifetimes := map[string]time.Duration{}
	for m, d := range stream.DefaultTokenLifetimes {
		lifetimes[m] = scaled(d)
	}
	if _, err := adminOf(p.nc, stream.Topology{}).EnsureTimings(ctx); err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	var running sync.WaitGroup
	defer func() { cancel(); running.Wait() }()
	for i, c := range p.clients {
		wnc, err := p.connect(nats.Name(fmt.Sprintf("bench-worker-%d", i)))
		if err != nil {
			return res, err
		}
		defer wnc.Close()
		w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: c, Threads: sc.threads, Name: fmt.Sprintf("bench-worker-%d", i),
			ShutdownGrace: time.Millisecond, TokenLifetimes: lifetimes,
			Policy:            retry.Policy{CapacityDelay: scaled(retry.DefaultCapacityDelay), CapacityMaxDelay: scaled(retry.DefaultCapacityMaxDelay)},
			ShareTimingsEvery: scaled(sc.share), ScheduleCheck: scaled(stream.DefaultScheduleCheck)})
		if err != nil {
			return res, err
		}
		running.Go(func() { _ = w.Run(wctx) })
	}
	// Warm-up: 30 plain tasks, 10 of each kind, as a pool that has run a
	// while knows its kinds.
	warm := make([]stream.Task, 30)
	for i := range warm {
		warm[i] = mixedTask(i)
		warm[i].ID = fmt.Sprintf("warm%d", i)
	}
	rs, err := p.client.SubmitAll(ctx, warm)
	if err != nil {
		return res, err
	}
	if err := p.client.WaitAll(ctx, rs, func(stream.Outcome, error) {}); err != nil {
		return res, fmt.Errorf("warm-up: %w", err)
	}
	// Let the workers share what they learned (every 30 s, scaled).
	time.Sleep(scaled(35 * time.Second))
	inBefore := p.emu.Stats().InCalls
	for _, k := range []string{"recaptcha", "turnstile", "image"} {
		for i, c := range p.clients {
			d, learned := c.SolveTime(k, stream.LeadQuantile)
			slog.Debug("lead", "kind", k, "worker", i, "lead_real", toReal(d), "learned", learned)
		}
	}

	rng := rand.New(rand.NewPCG(11, 13))
	start := time.Now()
	uses := make([]time.Time, n)
	tasks := make([]stream.Task, n)
	for i := range tasks {
		uses[i] = start.Add(scaled(time.Minute + time.Duration(rng.Int64N(int64(spread)))))
		tasks[i] = mixedTask(i)
	}
	var mu sync.Mutex
	collect := func(i int, o stream.Outcome, err error) {
		mu.Lock()
		defer mu.Unlock()
		if err != nil || o.Status != stream.StatusSolved {
			return
		}
		res.solved++
		if !o.SolvedAt.Before(uses[i]) {
			slog.Debug("late", "method", o.Method, "by", toReal(o.SolvedAt.Sub(uses[i])), "solve", o.SolveSeconds/scale)
			return
		}
		res.before++
		left := o.ExpiresAt.Sub(uses[i])
		res.lifeLeft = append(res.lifeLeft, float64(left)/float64(lifetimes[o.Method]))
		if o.Method == "userrecaptcha" {
			res.recaptchaLeft = append(res.recaptchaLeft, float64(left)/float64(lifetimes[o.Method]))
		}
		res.secsLeft = append(res.secsLeft, toReal(left).Seconds())
		res.earlyBy = append(res.earlyBy, toReal(uses[i].Sub(o.SolvedAt)))
	}
	var waits sync.WaitGroup
	submit := func(i int, t stream.Task) error {
		r, err := p.client.Submit(ctx, t)
		if err != nil {
			return fmt.Errorf("submit %s: %w", t.ID, err)
		}
		waits.Go(func() {
			o, err := p.client.Wait(ctx, r.ID)
			collect(i, o, err)
		})
		return nil
	}
	if !byHand {
		for i, t := range tasks {
			t.UseAt = stream.At(uses[i])
			if err := submit(i, t); err != nil {
				return res, err
			}
		}
	} else {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		slices.SortFunc(order, func(a, b int) int { return uses[a].Compare(uses[b]) })
		for _, i := range order {
			if d := time.Until(uses[i].Add(-scaled(time.Minute))); d > 0 {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return res, ctx.Err()
				}
			}
			if err := submit(i, tasks[i]); err != nil {
				return res, err
			}
		}
	}
	waits.Wait()
	res.inCalls = p.emu.Stats().InCalls - inBefore
	return res, ctx.Err()
}

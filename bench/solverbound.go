package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// gif1x1 is the smallest valid image task: a 1×1 GIF, base64.
const gif1x1 = "R0lGODlhAQABAIAAAAAAAP///yH5BAEAAAAALAAAAAABAAEAAAIBRAA7"

// realisticSolveTimes are the solve times of the solver-bound run, uniform on
// each range: reCAPTCHA v2 15–60 s, Turnstile 5–15 s, images 2–8 s.
func realisticSolveTimes() map[string]fakeapi.Range {
	return map[string]fakeapi.Range{
		fakeapi.KindRecaptcha: {Min: 15 * time.Second, Max: 60 * time.Second},
		fakeapi.KindTurnstile: {Min: 5 * time.Second, Max: 15 * time.Second},
		fakeapi.KindImage:     {Min: 2 * time.Second, Max: 8 * time.Second},
	}
}

// mixedTask is task i of the solver-bound run: reCAPTCHA v2, Turnstile and
// an image in turn.
func mixedTask(i int) stream.Task {
	id := "s" + strconv.Itoa(i)
	switch i % 3 {
	case 0:
		return stream.Task{ID: id, Method: "userrecaptcha", Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/login"}}
	case 1:
		return stream.Task{ID: id, Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}}
	default:
		return stream.Task{ID: id, Method: "base64", Params: stream.Params{"body": gif1x1}}
	}
}

// tap watches the emulator's traffic: when each captcha was accepted by
// in.php, when res.php first returned its answer, and what res.php calls it
// cost: a single poll costs its captcha one call, a batch poll
// (action=get&ids=…) costs each captcha it asks about an equal share. It
// needs no change to the emulator.
type tap struct {
	next http.Handler
	mu   sync.Mutex
	in   map[string]time.Time
	pick map[string]time.Time
	res  map[string]float64
	n    map[string]int // res.php calls that asked about the captcha
}

func newTap(next http.Handler) *tap {
	return &tap{next: next, in: map[string]time.Time{}, pick: map[string]time.Time{}, res: map[string]float64{}, n: map[string]int{}}
}

type recorder struct {
	http.ResponseWriter
	buf bytes.Buffer
}

func (r *recorder) Write(b []byte) (int, error) {
	r.buf.Write(b)
	return r.ResponseWriter.Write(b)
}

func (t *tap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var ids []string
	if r.URL.Path == "/res.php" {
		_ = r.ParseForm() // the emulator's own ParseForm then finds it done
		if r.Form.Get("action") == "get" {
			if id := r.Form.Get("id"); id != "" {
				ids = []string{id}
			} else if s := r.Form.Get("ids"); s != "" {
				ids = strings.Split(s, ",")
			}
		}
	}
	rec := &recorder{ResponseWriter: w}
	t.next.ServeHTTP(rec, r)
	now := time.Now()
	var reply struct {
		Status  int             `json:"status"`
		Request json.RawMessage `json:"request"`
	}
	ok := json.Unmarshal(rec.buf.Bytes(), &reply) == nil
	t.mu.Lock()
	defer t.mu.Unlock()
	if r.URL.Path == "/in.php" {
		if ok && reply.Status == 1 {
			t.in[string(bytes.Trim(reply.Request, `"`))] = now
		}
		return
	}
	states := make([]string, len(ids))
	if ok && reply.Status == 1 {
		switch len(ids) {
		case 1:
			states[0] = "answer"
		default:
			var list string
			if json.Unmarshal(reply.Request, &list) == nil {
				if s := strings.Split(list, "|"); len(s) == len(ids) {
					states = s
				}
			}
		}
	}
	for i, id := range ids {
		t.res[id] += 1 / float64(len(ids))
		t.n[id]++
		if st := states[i]; st != "" && st != "CAPCHA_NOT_READY" && !strings.HasPrefix(st, "ERROR") {
			if _, seen := t.pick[id]; !seen {
				t.pick[id] = now
			}
		}
	}
}

// solverBoundResult is one solver-bound run.
type solverBoundResult struct {
	Mode         string
	Plan         int
	Window       time.Duration // wall clock
	Solved       int           // completions within the window
	MeanSolve    time.Duration // emulator's solve time, real-time equivalent
	Throughput   float64       // solves per real-time second
	Limit        float64       // plan ÷ mean solve, per real-time second
	Busy         float64       // time-average of captchas being solved ÷ plan
	PickupLag    time.Duration // real-time equivalent
	PickupLagMax time.Duration
	ResPerSolve  float64 // res.php calls per solve, a batch call shared among the captchas it asked about
	AskedMax     int     // the most res.php calls that asked about one captcha
	InCalls      int
	Codes        map[string]int
}

// runSolverBound runs captchaq end to end against the emulator over HTTP with
// realistic solve times, time-scaled by scale, for window of wall clock after
// a warm-up, and measures throughput against Little's law.
//
// batchPolls makes the emulator answer multi-id polls, which CaptchaAI does
// not document; without it the emulator is the service as documented.
func runSolverBound(ctx context.Context, plan int, scale float64, window time.Duration, mode string, timing solver.Timing, batchPolls bool) (solverBoundResult, error) {
	res := solverBoundResult{Mode: mode, Plan: plan, Window: window}
	timing.Scale = scale
	emu := fakeapi.New(fakeapi.Config{Threads: plan, SolveTime: realisticSolveTimes(), TimeScale: scale, Seed: 7, BatchPolls: batchPolls,
		BurstWindow: time.Duration(3 * float64(time.Second) * scale), BanTime: time.Duration(10 * float64(time.Second) * scale)})
	tp := newTap(emu)
	emuURL, stopEmu, err := fakeapi.ServeLocal(tp)
	if err != nil {
		return res, err
	}
	defer stopEmu()

	sc, err := solver.NewClient(solver.Config{BaseURL: emuURL, APIKey: fakeapi.TestKey,
		Timing:            timing,
		MinSubmitInterval: time.Duration(float64(solver.DefaultMinSubmitInterval) * scale),
		SubmitWindow:      time.Duration(float64(solver.DefaultSubmitWindow) * scale)})
	if err != nil {
		return res, err
	}
	_, connect, stop, err := embedded(true, false)
	if err != nil {
		return res, err
	}
	defer stop()
	nc, err := connect(nats.Name("bench"))
	if err != nil {
		return res, err
	}
	defer nc.Close()
	client, err := stream.NewClient(ctx, nc, stream.ClientConfig{Name: "bench"})
	if err != nil {
		return res, err
	}
	// Enough tasks that the queue never runs dry: 1.5× what the plan can
	// solve in the warm-up and the window at the mean of the mix (17.5 s).
	warm := time.Duration(60 * float64(time.Second) * scale) // the longest solve
	perSec := float64(plan) / (17.5 * scale)
	n := int(1.5*perSec*(warm+window+time.Second).Seconds()) + plan
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = mixedTask(i)
	}
	if _, err := client.SubmitAll(ctx, tasks); err != nil {
		return res, fmt.Errorf("prefill %d tasks: %w", n, err)
	}

	var solvedAt sync.Map // task completion times, ns
	var solvedN atomic.Int64
	wnc, err := connect(nats.Name("bench-worker"))
	if err != nil {
		return res, err
	}
	defer wnc.Close()
	w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: sc, Threads: plan, Name: "bench-worker", ShutdownGrace: time.Millisecond,
		Observer: stream.ObserverFunc(func(o stream.Observation) {
			if o.Kind == stream.EventSolved {
				solvedAt.Store(solvedN.Add(1), time.Now())
			}
		})})
	if err != nil {
		return res, err
	}
	wctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	defer func() { cancel(); <-done }()

	select {
	case <-time.After(warm):
	case <-ctx.Done():
		return res, ctx.Err()
	}
	// The window: sample the emulator's concurrency every 20 ms.
	base := emu.Stats()
	start := time.Now()
	var busySum float64
	samples := 0
	tick := time.NewTicker(20 * time.Millisecond)
	for time.Since(start) < window {
		select {
		case <-tick.C:
		case <-ctx.Done():
			tick.Stop()
			return res, ctx.Err()
		}
		busySum += float64(emu.Stats().Concurrent)
		samples++
	}
	tick.Stop()
	end := time.Now()
	after := emu.Stats()
	solvedAt.Range(func(_, v any) bool {
		if t := v.(time.Time); !t.Before(start) && t.Before(end) {
			res.Solved++
		}
		return true
	})
	toReal := func(d time.Duration) time.Duration { return time.Duration(float64(d) / scale) }
	res.Busy = busySum / float64(samples) / float64(plan)
	res.Throughput = float64(res.Solved) / toReal(end.Sub(start)).Seconds()
	// Mean solve time: from in.php to first answered res.php, less the
	// emulator's pickup lag, over every captcha picked up so far.
	tp.mu.Lock()
	var sum time.Duration
	var picked int
	var calls float64
	for id, pt := range tp.pick {
		if it, ok := tp.in[id]; ok {
			sum += pt.Sub(it)
			picked++
			calls += tp.res[id]
			res.AskedMax = max(res.AskedMax, tp.n[id])
		}
	}
	tp.mu.Unlock()
	if picked == 0 || after.Pickups == 0 {
		return res, fmt.Errorf("nothing solved in the window")
	}
	res.PickupLag = toReal(after.PickupLagMean)
	res.PickupLagMax = toReal(after.PickupLagMax)
	res.MeanSolve = toReal(sum/time.Duration(picked)) - res.PickupLag
	res.Limit = float64(plan) / res.MeanSolve.Seconds()
	res.ResPerSolve = calls / float64(picked)
	res.InCalls = after.InCalls - base.InCalls
	res.Codes = after.Codes
	return res, nil
}

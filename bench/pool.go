package main

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// pool is what a solver-bound row runs: the emulator behind a tap, an
// embedded broker with the topology (and the plan quota the row tells), a
// producer, and one solver client per worker; run starts the workers.
type pool struct {
	sc      solverScenario
	scale   float64
	emu     *fakeapi.Server
	tap     *tap
	pb      *solver.Pingback // nil: no callbacks
	clients []*solver.Client
	client  *stream.Client
	connect func(...nats.Option) (*nats.Conn, error)
	nc      *nats.Conn // the admin's and the producer's connection
	stops   []func()
}

func (p *pool) stop() {
	for i := len(p.stops) - 1; i >= 0; i-- {
		p.stops[i]()
	}
}

// startPool starts what sc runs at time scale scale; stop undoes it.
func startPool(ctx context.Context, sc solverScenario, scale float64) (p *pool, err error) {
	p = &pool{sc: sc, scale: scale}
	defer func() {
		if err != nil {
			p.stop()
		}
	}()
	solve := sc.solve
	if solve == nil {
		solve = realisticSolveTimes()
	}
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * scale) }
	service := fakeapi.ServiceCaptchaAI
	if sc.pingback {
		service = fakeapi.Service2Captcha
	}
	if sc.service != "" {
		service = sc.service
	}
	if sc.pingback {
		cbURL, stopCB, err := fakeapi.ServeLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { p.pb.ServeHTTP(w, r) }))
		if err != nil {
			return p, err
		}
		p.stops = append(p.stops, stopCB)
		if p.pb, err = solver.NewPingback(cbURL + "/pingback"); err != nil {
			return p, err
		}
	}
	threadsInfo := "ERROR_BAD_PARAMETERS" // an error code: a service that tells nothing
	if sc.tellsPlan {
		threadsInfo = ""
	}
	p.emu = fakeapi.New(fakeapi.Config{Threads: sc.plan, SolveTime: solve, TimeScale: scale, Seed: 7, BatchPolls: sc.batch, Service: service,
		BurstWindow: scaled(3 * time.Second), BanTime: scaled(10 * time.Second), ThreadsInfoCode: threadsInfo})
	p.tap = newTap(p.emu)
	emuURL, stopEmu, err := fakeapi.ServeLocal(p.tap)
	if err != nil {
		return p, err
	}
	p.stops = append(p.stops, stopEmu)
	timing := sc.timing
	timing.Scale = scale
	p.clients = make([]*solver.Client, max(sc.workers, 1))
	for i := range p.clients {
		p.clients[i], err = solver.NewClient(solver.Config{BaseURL: emuURL, APIKey: fakeapi.TestKey, Timing: timing, LearnPlan: sc.learnPlan, PlanFromService: sc.tellsPlan,
			Service: solver.Service(service), Pingback: p.pb, Logger: debugLog(fmt.Sprintf("client-%d", i)),
			MinSubmitInterval: scaled(solver.DefaultMinSubmitInterval), SubmitWindow: scaled(solver.DefaultSubmitWindow)})
		if err != nil {
			return p, err
		}
	}
	_, connect, stopNS, err := embedded(true, false)
	if err != nil {
		return p, err
	}
	p.stops = append(p.stops, stopNS)
	p.connect = connect
	nc, err := connect(nats.Name("bench"))
	if err != nil {
		return p, err
	}
	p.stops = append(p.stops, nc.Close)
	// An admin creates the topology (`captchaq server` does); producers
	// and workers find it.
	p.nc = nc
	if _, err := adminOf(p.nc, stream.Topology{}).EnsureTopology(ctx, true); err != nil {
		return p, err
	}
	if p.client, err = stream.NewClient(ctx, nc, stream.ClientConfig{Name: "bench"}); err != nil {
		return p, err
	}
	if sc.quota {
		var opts []stream.PlanOption
		if sc.early {
			opts = append(opts, stream.PlanEarly())
		}
		if err := adminOf(p.nc, stream.Topology{}).SetPlan(ctx, sc.plan, opts...); err != nil {
			return p, err
		}
	}
	return p, nil
}

// run starts the workers, each with its client and sc.threads threads (0:
// the plan), reporting to obs, until stop. With sc.share each worker starts
// with the pool's timings and merges its client's into them every sc.share
// (scaled), as `captchaq worker --share-timings` does; without, each learns
// alone.
func (p *pool) run(ctx context.Context, obs stream.Observer) error {
	threads := p.sc.threads
	if threads == 0 {
		threads = p.sc.plan
	}
	if p.sc.share > 0 {
		// The workers merge into the pool's timings; the bucket is the
		// admin's to create (`captchaq server` does).
		if _, err := adminOf(p.nc, stream.Topology{}).EnsureTimings(ctx); err != nil {
			return err
		}
	}
	wctx, cancel := context.WithCancel(ctx)
	if p.sc.share > 0 {
		// The server sets the plan-wide quota from the plan the service
		// tells the workers, with its default early hand-back, as
		// `captchaq server` does.
		if err := adminOf(p.nc, stream.Topology{}).FollowServicePlan(wctx, debugLog("server"), stream.PlanEarly()); err != nil {
			cancel()
			return err
		}
	}
	var running sync.WaitGroup
	p.stops = append(p.stops, func() { cancel(); running.Wait() })
	scaled := func(d time.Duration) time.Duration { return time.Duration(float64(d) * p.scale) }
	for i, c := range p.clients {
		wnc, err := p.connect(nats.Name(fmt.Sprintf("bench-worker-%d", i)))
		if err != nil {
			return err
		}
		p.stops = append(p.stops, wnc.Close)
		w, err := stream.NewWorker(ctx, wnc, stream.WorkerConfig{Solver: c, Threads: threads, Name: fmt.Sprintf("bench-worker-%d", i), ShutdownGrace: time.Millisecond,
			Policy:   retry.Policy{CapacityDelay: scaled(retry.DefaultCapacityDelay), CapacityMaxDelay: scaled(retry.DefaultCapacityMaxDelay)},
			Observer: obs, ShareTimingsEvery: scaled(p.sc.share), LearnAlone: p.sc.share <= 0, Logger: debugLog(fmt.Sprintf("worker-%d", i))})
		if err != nil {
			return err
		}
		running.Go(func() { _ = w.Run(wctx) })
	}
	return nil
}

// adminOf is an admin of top on nc, as `captchaq server` makes one; top is
// one the bench made, so a configuration out of range is its bug.
func adminOf(nc *nats.Conn, top stream.Topology) *stream.Admin {
	a, err := stream.NewAdmin(nc, stream.AdminConfig{Topology: top})
	if err != nil {
		panic(err)
	}
	return a
}

// debugLog is the logger of a pool's client or worker: with BENCH_DEBUG=1
// their INFO lines and above on standard error, each with name; else nil
// (the default: none).
func debugLog(name string) *slog.Logger {
	if os.Getenv("BENCH_DEBUG") != "1" {
		return nil
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With(slog.String("in", name))
}

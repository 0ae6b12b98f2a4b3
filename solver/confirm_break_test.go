package solver_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// gridReq is a grid captcha: the same image as a reCAPTCHA grid, its own
// kind (KindGrid).
var gridReq = solver.Request{Method: "base64", Params: map[string]string{"body": pngB64, "recaptcha": "1",
	"textinstructions": "Select all images with buses", "recaptcharows": "3", "recaptchacols": "3"}}

// TestConfirmSkipsACaptchaOnItsLastPoll: a grid captcha far slower than
// its kind's answers has one poll, at 60 s, its last, which keeps its
// time; past its kind's answers it is the client's likeliest-done captcha.
// An image captcha submitted next is probably done at 2.5 s and must be
// confirmed then, not left to its first scheduled poll (20 s) because the
// hand-back keeps asking the grid captcha, which can only decline.
func TestConfirmSkipsACaptchaOnItsLastPoll(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindImage: {Min: time.Second, Max: 1100 * time.Millisecond},
		fakeapi.KindGrid:  {Min: time.Hour, Max: time.Hour}}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		Timing: solver.Timing{Scale: scale, NoBatch: true, Fixed: true,
			FirstPoll: map[string]time.Duration{solver.KindImage: 20 * time.Second, solver.KindGrid: time.Minute},
			MaxWait:   map[string]time.Duration{solver.KindGrid: time.Minute},
			BatchGap:  50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	// Both kinds learned ready evenly in 2–3 s.
	for _, kind := range []string{solver.KindImage, solver.KindGrid} {
		teachFast(c, kind, scale)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	// The grid captcha: asked to confirm at about 2.5 s, which it declines,
	// then counted done and handed back.
	gridCtx, gridCancel := context.WithCancel(ctx)
	handed := make(chan struct{})
	gridDone := make(chan error, 1)
	go func() {
		_, err := c.Solve(solver.WithProbablyReady(gridCtx, func() { close(handed) }), gridReq)
		gridDone <- err
	}()
	select {
	case <-handed:
	case err := <-gridDone:
		t.Fatalf("the grid captcha ended before it was handed back: %v", err)
	case <-ctx.Done():
		t.Fatal("the grid captcha was never handed back")
	}

	start := time.Now()
	a, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	// Confirmed at about 2.5 s; 15 s leaves a loaded machine room (with the
	// first poll at 10 s and a bound of 8 s, CI's load once passed it).
	if took >= 750*time.Millisecond {
		t.Errorf("the image answer came after %.1f s (scaled), want before 15 s: the confirm went to the grid captcha on its last poll",
			took.Seconds()/scale)
	}
	if n := api.Stats().ResCallsPerCaptcha[a.CaptchaID]; n != 1 {
		t.Errorf("%d res.php calls for the image captcha, want 1", n)
	}
	gridCancel()
	<-gridDone
	if n := api.Stats().ResCalls; n != 1 {
		t.Errorf("%d res.php calls in all, want 1: the grid captcha's last poll keeps its time", n)
	}
}

// TestConfirmKeepsAStragglerOnSchedule: a grid captcha ready at 60 s,
// long past its kind's answers (2–3 s), counts as done at every estimate
// even just after a CAPCHA_NOT_READY, and it is the likeliest-done captcha
// whenever eight callers of images keep the margin at work (a six-thread
// plan refuses some of their submissions). Each confirm takes its next
// scheduled poll (every 5 s from 10 s), so asked at every estimate it
// spent every poll but its last (105 s) within seconds and its answer
// waited there, 45 s after it was ready. Counted still being solved once
// seen not ready where its kind's fit allows nothing, it polls on its
// schedule and is found at about 60 s.
func TestConfirmKeepsAStragglerOnSchedule(t *testing.T) {
	t.Parallel()
	const scale = 0.02
	api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, Threads: 6, NoSlotCode: true, BurstLimit: 1 << 20,
		SolveTime: map[string]fakeapi.Range{
			fakeapi.KindImage: {Min: 2 * time.Second, Max: 3 * time.Second},
			fakeapi.KindGrid:  {Min: time.Minute, Max: time.Minute}}})
	url, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	gridIn := make(chan struct{})
	var submitted sync.Once
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		// The first submission accepted is the grid captcha's.
		OnCall: func(call solver.Call) {
			if call.Op == "in.php" && call.Code == "OK" {
				submitted.Do(func() { close(gridIn) })
			}
		},
		Timing: solver.Timing{Scale: scale, NoBatch: true, Fixed: true,
			FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second, solver.KindGrid: 10 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{solver.KindImage, solver.KindGrid} {
		teachFast(c, kind, scale)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	gridDone := make(chan struct{})
	var took time.Duration
	var grid solver.Answer
	go func() {
		defer close(gridDone)
		start := time.Now()
		a, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), gridReq)
		took, grid = time.Since(start), a
		if err != nil {
			t.Error(err)
		}
	}()
	select {
	case <-gridIn:
	case <-gridDone:
		t.Fatal("the grid captcha was not submitted")
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for {
				select {
				case <-gridDone:
					return
				default:
				}
				_, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
				if err != nil && solver.ClassOf(err) != retry.Capacity {
					t.Error(err)
					return
				}
			}
		})
	}
	wg.Wait()
	n := api.Stats().ResCallsPerCaptcha[grid.CaptchaID]
	t.Logf("the grid captcha answered after %.1f s (scaled), %d res.php calls", took.Seconds()/scale, n)
	if took >= time.Duration(85*float64(time.Second)*scale) {
		t.Errorf("the grid captcha ready at 60 s was answered after %.1f s (scaled), want before 85 s: its confirms spent its polls ahead of their time",
			took.Seconds()/scale)
	}
	if n > 20 {
		t.Errorf("%d res.php calls for the grid captcha, want at most MaxCalls (20)", n)
	}
}

// TestConfirmCanceled: the caller gives up while the confirming poll is
// in flight (res.php holds its reply). Solve returns at once with the
// context's error, and the next captcha of the client is confirmed as
// the first would have been: the cancel left nothing asked.
func TestConfirmCanceled(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindImage: {Min: time.Second, Max: 1100 * time.Millisecond}}})
	polling := make(chan struct{})
	var first sync.Once
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/res.php" {
			held := false
			first.Do(func() { held = true })
			if held {
				// Read, so that the server sees the client hang up.
				io.Copy(io.Discard, r.Body)
				close(polling)
				<-r.Context().Done()
				return
			}
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := fastImageClient(t, srv.URL, scale)
	req := solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), req)
		done <- err
	}()
	deadline := time.NewTimer(5 * time.Second)
	defer deadline.Stop()
	select {
	case <-polling:
	case <-deadline.C:
		t.Fatal("no confirming poll")
	}
	if n := api.Stats().ResCalls; n != 0 {
		t.Fatalf("%d res.php calls reached the service before the held one, want 0", n)
	}
	cancel()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("Solve: %v, want the context's error", err)
		}
	case <-deadline.C:
		t.Fatal("Solve did not return after its context was canceled during the confirming poll")
	}
	ctx2, cancel2 := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel2()
	start := time.Now()
	if _, err := c.Solve(solver.WithProbablyReady(ctx2, func() {}), req); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took >= 400*time.Millisecond {
		t.Errorf("the next captcha was answered after %.1f s (scaled), want before 8 s: it was not confirmed", took.Seconds()/scale)
	}
}

// TestConfirmPacedByTheSchedule429: a gateway in front of res.php answers
// HTTP 429 for the first 8 s after the submission. The captcha, ready at
// 1 s, is confirmed at about 2.5 s and refused; a refused poll says
// nothing of the captcha, which stays the likeliest done. Asked again at
// every estimate, it met three refusals within a few milliseconds and its
// Solve gave up (three failures in a row, PollErrors), where its schedule
// (10 s, 15 s, ...) would have polled past the refusals. Not asked again
// after a failed confirm before the time of the poll it took, its next
// poll is at 10 s, and it is answered.
func TestConfirmPacedByTheSchedule429(t *testing.T) {
	t.Parallel()
	const scale = 0.05
	api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, SolveTime: map[string]fakeapi.Range{
		fakeapi.KindImage: {Min: time.Second, Max: 1100 * time.Millisecond}}})
	var mu sync.Mutex
	var submitted time.Time
	refused := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		if r.URL.Path == "/res.php" && time.Since(submitted) < time.Duration(8*float64(time.Second)*scale) {
			refused++
			mu.Unlock()
			w.WriteHeader(http.StatusTooManyRequests)
			return
		}
		if r.URL.Path == "/in.php" {
			submitted = time.Now()
		}
		mu.Unlock()
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	c := fastImageClient(t, srv.URL, scale)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	mu.Lock()
	n := refused
	mu.Unlock()
	if err != nil {
		t.Fatalf("Solve: %v after %d refused polls, want the answer: the schedule polls past 8 s", err, n)
	}
}

// fastImageClient is a Client of the service at url whose images are
// polled on the fixed schedule (first poll at 10 s) and known to be ready
// in 2–3 s, deciding its hand-back every 10 ms (at time scale scale).
func fastImageClient(t *testing.T, url string, scale float64) *solver.Client {
	t.Helper()
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
		Timing: solver.Timing{Scale: scale, NoBatch: true, Fixed: true,
			FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second},
			BatchGap:  50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	teachFast(c, solver.KindImage, scale)
	return c
}

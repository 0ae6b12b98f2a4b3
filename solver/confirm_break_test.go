package solver_test

import (
	"context"
	"testing"
	"time"

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
// confirmed then, not left to its first scheduled poll (10 s) because the
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
			FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second, solver.KindGrid: time.Minute},
			MaxWait:   map[string]time.Duration{solver.KindGrid: time.Minute},
			BatchGap:  50 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	// Both kinds learned ready evenly in 2–3 s.
	for _, kind := range []string{solver.KindImage, solver.KindGrid} {
		for i := range 40 {
			lo := 2*time.Second + time.Second*time.Duration(i)/40
			c.Observe(kind, time.Duration(float64(lo)*scale), time.Duration(float64(lo+time.Second/40)*scale))
		}
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
	// Confirmed at about 2.5 s; 8 s leaves a loaded machine room.
	if took >= 400*time.Millisecond {
		t.Errorf("the image answer came after %.1f s (scaled), want before 8 s: the confirm went to the grid captcha on its last poll",
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

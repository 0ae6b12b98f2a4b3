package solver_test

import (
	"context"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A refusal of the full plan may be tried again once a thread frees
// (WaitedForThread) on CaptchaAI, which asks for no pause; not on 2captcha,
// whose limits ask for 5 s after ERROR_NO_SLOT_AVAILABLE.
func TestRefusalWaitedForThreadOnlyWhereNoPauseIsAsked(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		service string
		want    bool
	}{{fakeapi.ServiceCaptchaAI, true}, {fakeapi.Service2Captcha, false}} {
		t.Run(tc.service, func(t *testing.T) {
			t.Parallel()
			api := fakeapi.New(fakeapi.Config{Threads: 1, Service: tc.service,
				SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Minute, Max: time.Minute}}})
			url, stop, err := fakeapi.ServeLocal(api)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, LearnPlan: true, Service: solver.Service(tc.service),
				MinSubmitInterval: -1, SubmitBurst: -1, Timing: solver.Timing{Scale: 0.01, NoBatch: true}})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			first := make(chan error, 1)
			accepted := make(chan struct{})
			go func() {
				_, err := c.Solve(solver.WithAccepted(ctx, func(solver.Accepted) { close(accepted) }), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
				first <- err
			}()
			<-accepted // the plan's one thread is busy
			_, err = c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
			if solver.ClassOf(err) != retry.Capacity {
				t.Fatalf("second captcha: %v, want a refusal of the full plan", err)
			}
			if got := solver.WaitedForThread(err); got != tc.want {
				t.Errorf("WaitedForThread(%v) = %v, want %v", err, got, tc.want)
			}
			cancel()
			<-first
			if st := api.Stats(); st.Submitted != 1 {
				t.Errorf("%d captchas paid, want 1", st.Submitted)
			}
		})
	}
}

package solver_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// Solve with Request.CaptchaID polls that captcha instead of submitting
// one, and tells it (resumed) before its first poll; the service pays
// nothing more.
func TestSolveResumesAnAcceptedCaptcha(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	ctx := ctxT(t)
	req := turnstile("https://a.example/")
	id, err := b.client.Submit(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	submitted := time.Now()
	var told []solver.Accepted
	req.CaptchaID, req.Submitted = id, submitted
	a, err := b.client.Solve(solver.WithAccepted(ctx, func(a solver.Accepted) { told = append(told, a) }), req)
	if err != nil {
		t.Fatal(err)
	}
	if a.CaptchaID != id {
		t.Errorf("answer of captcha %s, want the resumed %s", a.CaptchaID, id)
	}
	if len(told) != 1 || told[0].ID != id || !told[0].Resumed || !told[0].At.Equal(submitted) {
		t.Errorf("told %+v, want the resumed captcha once", told)
	}
	if n := b.api.Stats().Submitted; n != 1 {
		t.Errorf("%d captchas accepted, want 1: the resumed one", n)
	}
}

// A resumed captcha the service does not know (ERROR_WRONG_CAPTCHA_ID:
// past its lifetime there) is submitted anew, and the new id is told as
// replacing it.
func TestSolveSubmitsAnewWhenTheResumedCaptchaIsUnknown(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	ctx := ctxT(t)
	var mu sync.Mutex
	var told []solver.Accepted
	req := turnstile("https://a.example/")
	req.CaptchaID, req.Submitted = "12345", time.Now().Add(-time.Hour)
	a, err := b.client.Solve(solver.WithAccepted(ctx, func(a solver.Accepted) {
		mu.Lock()
		told = append(told, a)
		mu.Unlock()
	}), req)
	if err != nil {
		t.Fatal(err)
	}
	if len(told) != 2 || told[0].ID != "12345" || !told[0].Resumed ||
		told[1].Resumed || told[1].Replaces != "12345" || told[1].ReplacedCode != "ERROR_WRONG_CAPTCHA_ID" || told[1].ID != a.CaptchaID {
		t.Errorf("told %+v, want the resumed captcha, then its replacement", told)
	}
	if n := b.api.Stats().Submitted; n != 1 {
		t.Errorf("%d captchas accepted, want 1", n)
	}
}

// A captcha held through failed polls past its whole schedule is still
// asked about once the service answers again: the 500s end, the answer is
// there, nothing is submitted again.
func TestHeldCaptchaOutlivesItsSchedule(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{SolveTime: fastSolve})
	srvURL, stop, err := fakeapi.ServeLocal(api)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: srvURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001, Fixed: true, NoBatch: true, MaxCalls: 3}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	accepted := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := c.Solve(solver.WithAccepted(ctx, func(solver.Accepted) {
			api.SetFaults(fakeapi.Faults{Outage: true}) // every poll fails from here
			close(accepted)
		}), turnstile("https://a.example/"))
		done <- err
	}()
	<-accepted
	// Well past the schedule's three polls and its MaxWait.
	for api.Stats().ResCalls < 10 {
		select {
		case err := <-done:
			t.Fatalf("Solve gave the captcha up during the outage: %v", err)
		case <-time.After(time.Millisecond):
		}
	}
	api.SetFaults(fakeapi.Faults{})
	if err := <-done; err != nil {
		t.Fatalf("Solve: %v", err)
	}
	if st := api.Stats(); st.Submitted != 1 || st.Solved != 1 {
		t.Errorf("accepted %d, solved %d; want 1 and 1", st.Submitted, st.Solved)
	}
}

package solver_test

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// idRecorder keeps what an in.php reply said, to learn the captcha id.
type idRecorder struct {
	http.ResponseWriter
	body bytes.Buffer
}

func (r *idRecorder) Write(b []byte) (int, error) {
	r.body.Write(b)
	return r.ResponseWriter.Write(b)
}

// captchaID is the id an in.php reply carries, JSON or text.
func captchaID(body string) string {
	if m := jsonRequest.FindStringSubmatch(body); m != nil {
		return m[1]
	}
	return strings.TrimPrefix(strings.TrimSpace(body), "OK|")
}

var jsonRequest = regexp.MustCompile(`"request"\s*:\s*"?([^",}]+)`)

// TestRateRefusalQuietsTheConfirms: res.php refuses the first captcha's
// confirming poll (at about 2.5 s) for its rate, as HTTP 429,
// ERROR_TOO_MUCH_REQUESTS or ERROR: 1005. For a minute the hand-back then
// asks no captcha early: a second captcha, ready at 1 s and probably done
// at 2.5 s, is first polled at its planned 10 s. Both Solves are answered
// at their planned polls.
func TestRateRefusalQuietsTheConfirms(t *testing.T) {
	t.Parallel()
	for name, refuse := range map[string]func(http.ResponseWriter){
		"HTTP 429":                func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) },
		"ERROR_TOO_MUCH_REQUESTS": func(w http.ResponseWriter) { _, _ = w.Write([]byte("ERROR_TOO_MUCH_REQUESTS")) },
		"ERROR: 1005":             func(w http.ResponseWriter) { _, _ = w.Write([]byte("ERROR: 1005")) },
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			const scale = 0.05
			api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, SolveTime: map[string]fakeapi.Range{
				fakeapi.KindImage: {Min: time.Second, Max: 1100 * time.Millisecond}}})
			var mu sync.Mutex
			submitted := map[string]time.Time{} // captcha id: when in.php answered
			var order []string
			firstPoll := map[string]time.Duration{} // captcha id: its first res.php call, from submission
			refused := make(chan struct{})
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				switch r.URL.Path {
				case "/in.php":
					rec := &idRecorder{ResponseWriter: w}
					api.ServeHTTP(rec, r)
					mu.Lock()
					id := captchaID(rec.body.String())
					submitted[id] = time.Now()
					order = append(order, id)
					mu.Unlock()
					return
				case "/res.php":
					_ = r.ParseForm()
					id := r.PostFormValue("id")
					mu.Lock()
					_, seen := firstPoll[id]
					if !seen {
						firstPoll[id] = time.Since(submitted[id])
					}
					first := !seen && len(order) > 0 && id == order[0]
					mu.Unlock()
					if first {
						refuse(w)
						close(refused)
						return
					}
				}
				api.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c := fastImageClient(t, srv.URL, scale)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req := solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}
			firstDone := make(chan error, 1)
			go func() {
				_, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), req)
				firstDone <- err
			}()
			select {
			case <-refused:
			case err := <-firstDone:
				t.Fatalf("the first captcha ended before its confirm was refused: %v", err)
			case <-ctx.Done():
				t.Fatal("the first captcha was never confirmed")
			}
			if _, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), req); err != nil {
				t.Fatalf("second Solve: %v", err)
			}
			if err := <-firstDone; err != nil {
				t.Fatalf("first Solve after a refused confirm: %v", err)
			}
			mu.Lock()
			defer mu.Unlock()
			first := firstPoll[order[1]]
			// Its planned first poll is at 10 s; 8 s leaves room for a slow
			// machine's timers, not for a confirm at 2.5 s.
			if first < time.Duration(8*float64(time.Second)*scale) {
				t.Errorf("the second captcha was first polled %.1f s (scaled) after its submission, within a minute of a rate refusal: want its planned poll at 10 s",
					first.Seconds()/scale)
			}
		})
	}
}

// marginPool is a pool whose other client's captchas are still being
// solved: it hands nothing back, so the margin keeps every thread of the
// Client under test and its hand-back asks rather than hands back.
type marginPool struct{}

func (marginPool) Report(solver.Occupancy) {}
func (marginPool) Others() []solver.Occupancy {
	return []solver.Occupancy{{V: 1, Free: -5, Ready: -4}}
}

// TestResCallsWithinThePace: eight callers keep captchas in flight, each
// solved in 3–20 s while the Client learned 2–3 s, so that the captchas
// kept by the margin count as done long before they are and are asked
// again and again. The Client's res.php calls, planned and early, stay
// within its service's askPace times a poll every 5 s per captcha in
// flight (counted over the captchas' lives), plus the burst and a poll
// per captcha (a confirm takes a planned poll up to 5 s early): on
// 2captcha the pace itself.
func TestResCallsWithinThePace(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		svc     solver.Service
		fake    string
		askPace float64
	}{
		{solver.TwoCaptcha, fakeapi.Service2Captcha, 1},
		{solver.CaptchaAI, fakeapi.ServiceCaptchaAI, 3},
	} {
		t.Run(string(tc.svc), func(t *testing.T) {
			t.Parallel()
			const scale = 0.02
			api := fakeapi.New(fakeapi.Config{Seed: 5, TimeScale: scale, Service: tc.fake, BurstLimit: 1 << 20,
				SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: 3 * time.Second, Max: 20 * time.Second}}})
			url, stop, err := fakeapi.ServeLocal(api)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(stop)
			c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
				Service: tc.svc,
				Timing: solver.Timing{Scale: scale, NoBatch: true, Fixed: true,
					FirstPoll: map[string]time.Duration{solver.KindImage: 5 * time.Second}}})
			if err != nil {
				t.Fatal(err)
			}
			teachFast(c, solver.KindImage, scale)
			c.JoinPool(marginPool{})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var mu sync.Mutex
			var inFlight time.Duration // Σ of the captchas' lives
			solves := 0
			var wg sync.WaitGroup
			for range 8 {
				wg.Go(func() {
					for range 4 {
						start := time.Now()
						_, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
						mu.Lock()
						inFlight += time.Since(start)
						solves++
						mu.Unlock()
						if err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			wg.Wait()
			st := api.Stats()
			pace := time.Duration(float64(solver.DefaultPollInterval) * scale)
			budget := tc.askPace*float64(inFlight)/float64(pace) + 2 + float64(solves)
			t.Logf("%d solves, %d res.php calls, %.0f captcha-polls of pace (×%v: %.0f), budget %.0f", solves, st.ResCalls,
				float64(inFlight)/float64(pace), tc.askPace, tc.askPace*float64(inFlight)/float64(pace), budget)
			if float64(st.ResCalls) > budget {
				t.Errorf("%d res.php calls, want at most %.0f: %v× a poll every 5 s per captcha in flight, the burst and a poll per captcha", st.ResCalls, budget, tc.askPace)
			}
		})
	}
}

// TestBatchRateRefusalQuietsTheConfirms: two captchas polled in batches,
// both ready at 1 s and probably done at 2.5 s, where the hand-back asks
// about one; the batch call that asks is refused for its rate (HTTP 429,
// or ERROR_TOO_MUCH_REQUESTS for the whole batch). No res.php call follows
// before their planned polls at 10 s, and both are answered there.
func TestBatchRateRefusalQuietsTheConfirms(t *testing.T) {
	t.Parallel()
	for name, refuse := range map[string]func(http.ResponseWriter){
		"HTTP 429":                func(w http.ResponseWriter) { w.WriteHeader(http.StatusTooManyRequests) },
		"ERROR_TOO_MUCH_REQUESTS": func(w http.ResponseWriter) { _, _ = w.Write([]byte("ERROR_TOO_MUCH_REQUESTS")) },
	} {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			t.Parallel()
			const scale = 0.05
			api := fakeapi.New(fakeapi.Config{Seed: 9, TimeScale: scale, BatchPolls: true, SolveTime: map[string]fakeapi.Range{
				fakeapi.KindImage: {Min: time.Second, Max: 1100 * time.Millisecond}}})
			var mu sync.Mutex
			var first time.Time // the first submission
			var calls []time.Duration
			refused := false
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				mu.Lock()
				switch r.URL.Path {
				case "/in.php":
					if first.IsZero() {
						first = time.Now()
					}
				case "/res.php":
					calls = append(calls, time.Since(first))
					if !refused {
						refused = true
						mu.Unlock()
						refuse(w)
						return
					}
				}
				mu.Unlock()
				api.ServeHTTP(w, r)
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1,
				Timing: solver.Timing{Scale: scale, Fixed: true,
					FirstPoll: map[string]time.Duration{solver.KindImage: 10 * time.Second},
					BatchGap:  50 * time.Millisecond}})
			if err != nil {
				t.Fatal(err)
			}
			teachFast(c, solver.KindImage, scale)
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			var wg sync.WaitGroup
			for range 2 {
				wg.Go(func() {
					if _, err := c.Solve(solver.WithProbablyReady(ctx, func() {}), solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}); err != nil {
						t.Errorf("Solve: %v", err)
					}
				})
			}
			wg.Wait()
			mu.Lock()
			defer mu.Unlock()
			if len(calls) == 0 {
				t.Fatal("no res.php call")
			}
			sec := func(d time.Duration) float64 { return d.Seconds() / scale }
			if calls[0] > time.Duration(8*float64(time.Second)*scale) {
				t.Fatalf("the first res.php call came at %.1f s (scaled): no confirm to refuse", sec(calls[0]))
			}
			for _, at := range calls[1:] {
				if at < time.Duration(9*float64(time.Second)*scale) {
					t.Errorf("a res.php call at %.1f s (scaled), after the refusal at %.1f s and before the planned polls at 10 s", sec(at), sec(calls[0]))
				}
			}
		})
	}
}

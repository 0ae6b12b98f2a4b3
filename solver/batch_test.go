package solver_test

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// batchCalls counts res.php requests that ask about several captchas.
func batchCalls(n *atomic.Int64) func(http.Handler) http.Handler {
	return func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/res.php" {
				_ = r.ParseForm()
				if r.Form.Get("ids") != "" {
					n.Add(1)
				}
			}
			inner.ServeHTTP(w, r)
		})
	}
}

// TestBatchPollingMixedKinds solves captchas of every kind at once with batch
// polling on: each answer is the one res.php gives for its id alone (GeeTest
// objects whole, Turnstile with its useragent), and batch calls were made.
func TestBatchPollingMixedKinds(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{BatchPolls: true}})
	img := solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}
	reqs := []solver.Request{recaptcha("https://a.example/"), turnstile("https://b.example/"), geetest("https://c.example/"), img}
	type got struct {
		kind int
		a    solver.Answer
	}
	var mu sync.Mutex
	var answers []got
	var wg sync.WaitGroup
	for i := range 48 { // under the client's 55 in.php calls in 3 s
		wg.Go(func() {
			a, err := b.client.Solve(ctxT(t), reqs[i%len(reqs)])
			if err != nil {
				t.Errorf("Solve %d: %v", i, err)
				return
			}
			mu.Lock()
			answers = append(answers, got{i % len(reqs), a})
			mu.Unlock()
		})
	}
	wg.Wait()
	for _, g := range answers {
		alone, err := b.client.Fetch(ctxT(t), g.a.CaptchaID)
		if err != nil {
			t.Fatalf("Fetch %s: %v", g.a.CaptchaID, err)
		}
		if !bytes.Equal(g.a.Solution, alone.Solution) || g.a.UserAgent != alone.UserAgent {
			t.Errorf("kind %d: answer %s (ua %q), res.php alone says %s (ua %q)", g.kind, g.a.Solution, g.a.UserAgent, alone.Solution, alone.UserAgent)
		}
		if g.kind == 1 && g.a.UserAgent == "" {
			t.Errorf("Turnstile answer without its useragent")
		}
	}
	if st := b.api.Stats(); st.BatchCalls == 0 || st.Solved != 48 {
		t.Errorf("emulator: %d batch calls, %d solved; want some and 48", st.BatchCalls, st.Solved)
	}
}

// TestBatchPollingAsksAboutTurnstile: Turnstile captchas are asked about in
// batch calls (captcha.BatchReady), and each ready one is then fetched once
// on its own for the useragent a batch reply lacks, rather than every
// Turnstile captcha being polled one by one.
func TestBatchPollingAsksAboutTurnstile(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{api: fakeapi.Config{BatchPolls: true}})
	const n = 8
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			a, err := b.client.Solve(ctxT(t), turnstile("https://b.example/"+strconv.Itoa(i)))
			if err != nil {
				t.Errorf("Solve %d: %v", i, err)
				return
			}
			if a.UserAgent == "" {
				t.Errorf("Turnstile answer without its useragent")
			}
		})
	}
	wg.Wait()
	if st := b.api.Stats(); st.BatchAsked == 0 || st.Solved != n || st.Submitted != n {
		t.Errorf("emulator: asked about %d captchas in batch calls, %d solved, %d paid; want some, %d and %d", st.BatchAsked, st.Solved, st.Submitted, n, n)
	}
}

// TestBatchSpendsNoMoreThanSinglePolling: captchas that are never ready
// cost single polling MaxCalls res.php calls each; with batch polling the
// same captchas give up the same way and cost at most that in all.
func TestBatchSpendsNoMoreThanSinglePolling(t *testing.T) {
	t.Parallel()
	const n, calls = 20, 6
	never := fakeapi.Config{BatchPolls: true, SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: time.Hour, Max: time.Hour}}}
	b := setup(t, opts{api: never, client: solver.Config{Timing: solver.Timing{Scale: 0.001, Fixed: true, MaxCalls: calls}}})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			_, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/"))
			if solver.CodeOf(err) != solver.CodePollLimit {
				t.Errorf("Solve: %v, want %s", err, solver.CodePollLimit)
			}
		})
	}
	wg.Wait()
	st := b.api.Stats()
	if st.ResCalls > n*calls || st.BatchCalls == 0 {
		t.Errorf("%d res.php calls (%d batch), want at most %d and some batch calls", st.ResCalls, st.BatchCalls, n*calls)
	}
	// Every captcha's last poll is its own.
	for id, c := range st.ResCallsPerCaptcha {
		if c < 1 {
			t.Errorf("captcha %s: %d calls of its own, want its last poll", id, c)
		}
	}
	t.Logf("%d captchas × %d polls: %d res.php calls, %d of them batch calls asking about %d", n, calls, st.ResCalls, st.BatchCalls, st.BatchAsked)
}

// TestBatchFallsBackWithoutSupport: a service that ignores ids answers a
// batch call ERROR_WRONG_CAPTCHA_ID. After two such replies the client polls
// each captcha on its own, says so once in the log, and every solve succeeds.
func TestBatchFallsBackWithoutSupport(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	var logBuf logbuf.Buffer
	log := slog.New(slog.NewTextHandler(&logBuf, &slog.HandlerOptions{Level: slog.LevelWarn}))
	slow := map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: 30 * time.Millisecond, Max: 60 * time.Millisecond}}
	b := setup(t, opts{api: fakeapi.Config{SolveTime: slow}, wrap: batchCalls(&asked), client: solver.Config{Logger: log}})
	solveAll := func(n int) {
		var wg sync.WaitGroup
		for range n {
			wg.Go(func() {
				if _, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/")); err != nil {
					t.Errorf("Solve: %v", err)
				}
			})
		}
		wg.Wait()
	}
	solveAll(30)
	if got := asked.Load(); got != 2 {
		t.Errorf("%d batch calls, want 2 before batching stops", got)
	}
	solveAll(10)
	if got := asked.Load(); got != 2 {
		t.Errorf("%d batch calls after it stopped, want still 2", got)
	}
	if n := strings.Count(logBuf.String(), "does not answer batch polls"); n != 1 {
		t.Errorf("log has %d warnings about batch polls, want 1:\n%s", n, logBuf.String())
	}
	if st := b.api.Stats(); st.Solved != 40 {
		t.Errorf("solved %d, want 40", st.Solved)
	}
}

// TestBatchFatalReplyEndsEverySolve: a batch call answered with a Fatal code
// (the key was revoked) ends every captcha waiting with that code. The key
// is revoked by the first batch call and refused from then on, by in.php and
// single polls too, as by a service: a captcha accepted just before, told
// nothing by a batch call, ends on its own next poll.
func TestBatchFatalReplyEndsEverySolve(t *testing.T) {
	t.Parallel()
	var asked atomic.Int64
	var gone atomic.Bool
	revoked := func(inner http.Handler) http.Handler {
		return batchCalls(&asked)(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/res.php" && r.Form.Get("ids") != "" {
				gone.Store(true)
			}
			if gone.Load() {
				w.Write([]byte(`{"status":0,"request":"ERROR_KEY_DOES_NOT_EXIST"}`))
				return
			}
			inner.ServeHTTP(w, r)
		}))
	}
	never := fakeapi.Config{BatchPolls: true, SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: time.Hour, Max: time.Hour}}}
	b := setup(t, opts{api: never, wrap: revoked})
	var fatal atomic.Int64
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			_, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/"))
			var e *solver.Error
			if errors.As(err, &e) && e.Class == retry.Fatal && e.Code == "ERROR_KEY_DOES_NOT_EXIST" {
				fatal.Add(1)
			} else {
				t.Errorf("Solve: %v, want ERROR_KEY_DOES_NOT_EXIST (fatal)", err)
			}
		})
	}
	wg.Wait()
	if asked.Load() == 0 || fatal.Load() == 0 {
		t.Errorf("%d batch calls, %d solves ended fatal; want some of each", asked.Load(), fatal.Load())
	}
}

// batchReply answers batch calls (ids=…) with reply(k) for the k-th one
// when it says ok, and hands every other request to the emulator.
func batchReply(reply func(k int64) (status int, body string, ok bool)) func(http.Handler) http.Handler {
	var k atomic.Int64
	return func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path == "/res.php" {
				_ = r.ParseForm()
				if r.Form.Get("ids") != "" {
					if st, body, ok := reply(k.Add(1)); ok {
						w.WriteHeader(st)
						io.WriteString(w, body)
						return
					}
				}
			}
			inner.ServeHTTP(w, r)
		})
	}
}

// TestBatchBusyReplyKeepsTheBudget: a service that answers batch calls "too
// many requests" is asked no more often than single polling would ask it,
// and batch polling stays on once it worked.
func TestBatchBusyReplyKeepsTheBudget(t *testing.T) {
	t.Parallel()
	const n, calls = 20, 6
	never := fakeapi.Config{BatchPolls: true, SolveTime: map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: time.Hour, Max: time.Hour}}}
	busy := batchReply(func(k int64) (int, string, bool) { return 200, "ERROR_TOO_MUCH_REQUESTS", k > 1 })
	b := setup(t, opts{api: never, wrap: busy, client: solver.Config{Timing: solver.Timing{Scale: 0.001, Fixed: true, MaxCalls: calls}}})
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() {
			if _, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/")); solver.CodeOf(err) != solver.CodePollLimit {
				t.Errorf("Solve: %v, want %s", err, solver.CodePollLimit)
			}
		})
	}
	wg.Wait()
	if got := b.resGet.Load(); got > n*calls {
		t.Errorf("%d res.php calls; single polling makes at most %d", got, n*calls)
	}
}

// TestBatchFailuresFallBackToOwnPolls: a gateway that fails every batch call
// (HTTP 502) while single polls work costs no solve: each captcha polls on its
// own after a failed batch call.
func TestBatchFailuresFallBackToOwnPolls(t *testing.T) {
	t.Parallel()
	bad := batchReply(func(int64) (int, string, bool) { return 502, "<html><title>502 Bad Gateway</title></html>", true })
	slow := map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: 60 * time.Millisecond, Max: 70 * time.Millisecond}}
	b := setup(t, opts{api: fakeapi.Config{BatchPolls: true, SolveTime: slow}, wrap: bad, client: solver.Config{Timing: solver.Timing{Scale: 0.001, Fixed: true}}})
	var wg sync.WaitGroup
	for range 10 {
		wg.Go(func() {
			if _, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/")); err != nil {
				t.Errorf("Solve: %v", err)
			}
		})
	}
	wg.Wait()
}

// TestBatchFatalErrorNamesEachCaptcha: a Fatal batch reply ends every solve
// it asked about with an error of its own that names its captcha.
func TestBatchFatalErrorNamesEachCaptcha(t *testing.T) {
	t.Parallel()
	// The key is revoked once the captchas are in: every res.php call is
	// refused, a batch call (which names every captcha it asks about) and a
	// captcha polled on its own (a probe, or one alone in flight) alike.
	var batches atomic.Int64
	revoked := func(inner http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/res.php" {
				inner.ServeHTTP(w, r)
				return
			}
			if _ = r.ParseForm(); r.Form.Get("ids") != "" {
				batches.Add(1)
			}
			io.WriteString(w, "ERROR_WRONG_USER_KEY")
		})
	}
	slow := map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: 60 * time.Millisecond, Max: 70 * time.Millisecond}}
	b := setup(t, opts{api: fakeapi.Config{BatchPolls: true, SolveTime: slow}, wrap: revoked})
	var mu sync.Mutex
	seen := map[*solver.Error]bool{}
	var wg sync.WaitGroup
	for range 5 {
		wg.Go(func() {
			_, err := b.client.Solve(ctxT(t), recaptcha("https://a.example/"))
			var e *solver.Error
			if !errors.As(err, &e) || e.Class != retry.Fatal {
				t.Errorf("Solve: %v, want ERROR_WRONG_USER_KEY (fatal)", err)
				return
			}
			if e.CaptchaID == "" {
				t.Errorf("fatal error %v names no captcha", err)
			}
			mu.Lock()
			if seen[e] {
				t.Errorf("two solves share one *Error")
			}
			seen[e] = true
			mu.Unlock()
		})
	}
	wg.Wait()
	if batches.Load() == 0 {
		t.Errorf("no batch call was made: the test proves nothing about batch replies")
	}
}

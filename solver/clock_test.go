package solver_test

import (
	"bytes"
	"context"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// clock is a clock a test moves: real time plus an offset.
type clock struct {
	mu     sync.Mutex
	offset time.Duration
}

func (c *clock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *clock) move(d time.Duration) {
	c.mu.Lock()
	c.offset += d
	c.mu.Unlock()
}

// TestGivesUpOnTheClock: a captcha is given up MaxWait (120 s for images)
// after submission on the client's clock. Moving that clock an hour on as
// res.php answers CAPCHA_NOT_READY ends the wait at once with CodeTimeout,
// without 120 s of real time.
func TestGivesUpOnTheClock(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Hour, Max: time.Hour}}})
	var clk clock
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(w, r)
		if r.URL.Path == "/res.php" {
			clk.move(time.Hour)
		}
	}))
	defer srv.Close()
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, Now: clk.now,
		Timing: solver.Timing{NoBatch: true, FirstPoll: map[string]time.Duration{solver.KindImage: time.Millisecond}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err = c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	if solver.CodeOf(err) != solver.CodeTimeout {
		t.Fatalf("Solve: %v, want %s once the clock passed MaxWait", err, solver.CodeTimeout)
	}
	if st := api.Stats(); st.ResCalls != 1 {
		t.Errorf("%d res.php calls, want 1", st.ResCalls)
	}
}

// TestOutageSpanFollowsTheClock: an outage starts at the client's clock
// reading and is reported at WARN once that clock says it lasted
// OutageWarnAfter (1 min by default), without waiting for it.
func TestOutageSpanFollowsTheClock(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close() // nothing listens there now
	var clk clock
	clk.move(time.Hour)
	var logs bytes.Buffer
	var mu sync.Mutex
	log := slog.New(slog.NewTextHandler(&lockedWriter{w: &logs, mu: &mu}, nil))
	c, err := solver.NewClient(solver.Config{BaseURL: url, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, Now: clk.now, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	before := clk.now()
	if _, err := c.Balance(ctxT(t)); solver.CodeOf(err) != solver.CodeUnreachable {
		t.Fatalf("Balance: %v, want UNREACHABLE", err)
	}
	if since, _ := c.Unreachable(); since.Before(before) || since.After(clk.now()) {
		t.Errorf("outage since %v, want the client's clock (%v)", since, before)
	}
	clk.move(4 * time.Minute)
	if _, err := c.Balance(ctxT(t)); solver.CodeOf(err) != solver.CodeUnreachable {
		t.Fatalf("Balance: %v, want UNREACHABLE", err)
	}
	mu.Lock()
	defer mu.Unlock()
	if out := logs.String(); !strings.Contains(out, "level=WARN") || !strings.Contains(out, "for=4m0s") {
		t.Errorf("log after the clock moved 4 min:\n%s\nwant a WARN that the outage lasted 4m0s", out)
	}
}

type lockedWriter struct {
	w  *bytes.Buffer
	mu *sync.Mutex
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

package main

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// newFrontBed is an outage bed whose service is the emulator behind an
// HTTP front that answers, while on, the calls to path its own way (what
// a CDN, a load balancer or a broken replica in front of the service
// does); the worker runs with default flags.
func newFrontBed(t *testing.T, path string, on *atomic.Bool, front func(w http.ResponseWriter, r *http.Request, api *fakeapi.Server)) *outageBed {
	t.Helper()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	api := outageAPI()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == path && on.Load() {
			front(w, r, api)
			return
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	b := &outageBed{natsURL: natsURL, client: client, api: api}
	b.startWorker(t, srv.URL)
	return b
}

// The service misbehaves as a front before it does, for 12 s once 6
// captchas are at the service, under 20 tasks and the shipped worker:
// res.php answers a Cloudflare-like HTML page with status 200, or a JSON
// reply cut mid-way, or a 502 with a body; in.php answers a 503 with a
// body, or a WAF's 403 page (which stopped the worker as a fatal refusal of
// its key). Every task is solved on its first attempt and paid once.
func TestHostileFrontPaysOnce(t *testing.T) {
	t.Parallel()
	html := func(w http.ResponseWriter, _ *http.Request, _ *fakeapi.Server) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<!DOCTYPE html><html><head><title>Just a moment...</title></head><body>Checking your browser | Cloudflare</body></html>"))
	}
	for _, tc := range []struct {
		name, path string
		front      func(w http.ResponseWriter, r *http.Request, api *fakeapi.Server)
	}{
		{"res-html-200", "/res.php", html},
		{"res-cut-json", "/res.php", func(w http.ResponseWriter, _ *http.Request, _ *fakeapi.Server) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				return
			}
			_, _ = buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 80\r\n\r\n{\"status\":0,\"request\":\"CAPCHA_NOT")
			_ = buf.Flush()
			_ = conn.Close()
		}},
		{"res-502-body", "/res.php", func(w http.ResponseWriter, _ *http.Request, _ *fakeapi.Server) {
			http.Error(w, "<html><body><h1>502 Bad Gateway</h1>nginx</body></html>", http.StatusBadGateway)
		}},
		{"in-503-body", "/in.php", func(w http.ResponseWriter, _ *http.Request, _ *fakeapi.Server) {
			http.Error(w, "<html><body><h1>503 Service Temporarily Unavailable</h1></body></html>", http.StatusServiceUnavailable)
		}},
		{"in-403-waf", "/in.php", func(w http.ResponseWriter, _ *http.Request, _ *fakeapi.Server) {
			w.Header().Set("Content-Type", "text/html")
			w.WriteHeader(http.StatusForbidden)
			_, _ = w.Write([]byte("<!DOCTYPE html><html><head><title>Attention Required! | Cloudflare</title></head><body>Sorry, you have been blocked</body></html>"))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var on atomic.Bool
			var hits atomic.Int32
			b := newFrontBed(t, tc.path, &on, func(w http.ResponseWriter, r *http.Request, api *fakeapi.Server) {
				hits.Add(1)
				tc.front(w, r, api)
			})
			rs := b.submit(t, 20)
			b.during(t, 6, func() { on.Store(true) })
			time.Sleep(12 * time.Second) //nolint:forbidigo // the fault's length is the test's input
			on.Store(false)
			b.solvedOnce(t, rs, 3*time.Minute)
			st := b.api.Stats()
			t.Logf("%s: %d calls answered by the front; in.php calls %d, accepted %d, res.php calls %d, codes %v",
				tc.name, hits.Load(), st.InCalls, st.Submitted, st.ResCalls, st.Codes)
			require.Positive(t, hits.Load(), "the front misbehaved")
		})
	}
}

// The service takes every captcha but answers in.php only after the
// worker's call has timed out (30 s), while getbalance and res.php answer
// at once: each late reply may have been paid, and spends the task's
// attempt, so the shipped worker pays at most its attempt budget (3) per
// task. Taken as an outage (no attempt spent), it submitted again after
// each probe and paid until the task's deadline. Two tasks with a
// 3-minute deadline; long (about two minutes): CAPTCHAQ_SOAK=1.
func TestLateInPHPPaysAtMostTheAttemptBudget(t *testing.T) {
	if os.Getenv("CAPTCHAQ_SOAK") != "1" {
		t.Skip("CAPTCHAQ_SOAK=1 runs the late in.php replies")
	}
	t.Parallel()
	on := new(atomic.Bool)
	on.Store(true)
	b := newFrontBed(t, "/in.php", on, func(_ http.ResponseWriter, r *http.Request, api *fakeapi.Server) {
		api.ServeHTTP(httptest.NewRecorder(), r) // taken, and paid
		<-r.Context().Done()                     // OK|id after the worker gave up
	})
	const n = 2
	tasks := make([]stream.Task, n)
	for i := range tasks {
		tasks[i] = stream.Task{ID: fmt.Sprintf("late%d", i), Method: "turnstile", Deadline: time.Now().Add(3 * time.Minute),
			Params: stream.Params{"sitekey": fmt.Sprintf("0x4AAAAAAAB%d", i), "pageurl": "https://shop.example/"}}
	}
	rs, err := b.client.SubmitAll(t.Context(), tasks)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(t.Context(), 4*time.Minute)
	defer cancel()
	outcomes := 0
	require.NoError(t, b.client.WaitAll(ctx, rs, func(o stream.Outcome, err error) {
		outcomes++
		t.Logf("%s: %s %s %s, %d attempts", o.ID, o.Status, o.Reason, o.Error, o.Attempts)
	}))
	require.Equal(t, n, outcomes)
	st := b.api.Stats()
	t.Logf("in.php calls %d, accepted %d, per task %v", st.InCalls, st.Submitted, st.PerTask)
	for k, paid := range st.PerTask {
		require.LessOrEqual(t, paid, 3, "task %s paid past its attempt budget", k)
	}
}

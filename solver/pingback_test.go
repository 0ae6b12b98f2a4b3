package solver_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// pingbackSetup serves a Pingback and an emulator of svc whose images take
// 1–2 s (time scale 0.02), and returns a client that uses the Pingback.
// onSubmit (nil: none) hears of each captcha id before the client does.
func pingbackSetup(t *testing.T, svc string, listening bool, onSubmit func(id string)) (*fakeapi.Server, *solver.Client, *solver.Pingback, string) {
	t.Helper()
	const scale = 0.02
	var pb *solver.Pingback
	cbs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { pb.ServeHTTP(w, r) }))
	t.Cleanup(cbs.Close)
	var err error
	if pb, err = solver.NewPingback(cbs.URL + "/captchaq/cb"); err != nil {
		t.Fatal(err)
	}
	if !listening {
		cbs.Close() // the service's callbacks go nowhere
	}
	api := fakeapi.New(fakeapi.Config{Seed: 9, Service: svc, TimeScale: scale,
		SolveTime: map[string]fakeapi.Range{fakeapi.KindImage: {Min: time.Second, Max: 2 * time.Second}}})
	apiURL, stop, err := fakeapi.ServeLocal(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/in.php" || onSubmit == nil {
			api.ServeHTTP(w, r)
			return
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		var reply struct {
			Request string `json:"request"`
		}
		if json.Unmarshal(rec.Body.Bytes(), &reply) == nil {
			onSubmit(reply.Request)
		}
		w.WriteHeader(rec.Code)
		w.Write(rec.Body.Bytes())
	}))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	c, err := solver.NewClient(solver.Config{BaseURL: apiURL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, Service: solver.Service(svc),
		Pingback: pb, Timing: solver.Timing{Scale: scale, NoBatch: true}})
	if err != nil {
		t.Fatal(err)
	}
	return api, c, pb, cbs.URL
}

// TestPingbackInsteadOfPolling: with the 2captcha profile the service calls
// back when each answer is ready; the client fetches it at once and never
// polls before: one res.php call per solve (the lag it gives is measured by
// the bench's pingback row).
func TestPingbackInsteadOfPolling(t *testing.T) {
	t.Parallel()
	api, c, pb, _ := pingbackSetup(t, fakeapi.Service2Captcha, true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 10 {
		if _, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}); err != nil {
			t.Fatal(err)
		}
	}
	st := api.Stats()
	t.Logf("%d callbacks, %d res.php calls, pickup lag mean %v (real %v)", st.Pingbacks, st.ResCalls, st.PickupLagMean, st.PickupLagMean*50)
	if st.Pingbacks != 10 || pb.Callbacks() != 10 {
		t.Errorf("%d callbacks sent, %d received, want 10", st.Pingbacks, pb.Callbacks())
	}
	if st.ResCalls != 10 {
		t.Errorf("%d res.php calls for 10 solves, want 10: one fetch per callback, no polls", st.ResCalls)
	}
}

// TestPingbackMissedFallsBackToPolling: callbacks that never arrive cost lag,
// not the captcha: it is polled after the grace.
func TestPingbackMissedFallsBackToPolling(t *testing.T) {
	t.Parallel()
	api, c, _, _ := pingbackSetup(t, fakeapi.Service2Captcha, false, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}); err != nil {
		t.Fatal(err)
	}
	if st := api.Stats(); st.Pingbacks != 1 || st.ResCalls == 0 {
		t.Errorf("%d callbacks, %d res.php calls: want one callback (that went nowhere) and the answer polled", st.Pingbacks, st.ResCalls)
	}
}

// TestPingbackRefusesForgery: a callback on another path than the secret one
// is refused, and none ever carries the answer: a forged callback on the
// secret path for a captcha in progress only makes the client ask res.php,
// which says not ready, and the answer stays the service's.
func TestPingbackRefusesForgery(t *testing.T) {
	t.Parallel()
	var pb *solver.Pingback
	forge := func(id string) {
		resp, err := http.PostForm(pb.URL(), url.Values{"id": {id}, "code": {"forged"}})
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	}
	api, c, pb, base := pingbackSetup(t, fakeapi.Service2Captcha, true, func(id string) { forge(id) })
	for _, path := range []string{"/captchaq/cb", "/captchaq/cb/0123", "/"} {
		resp, err := http.PostForm(base+path, url.Values{"id": {"1"}, "code": {"forged"}})
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("callback on %s: HTTP %d, want 404", path, resp.StatusCode)
		}
	}
	if n := pb.Callbacks(); n != 0 {
		t.Errorf("%d callbacks on wrong paths accepted", n)
	}
	// The forger knows the secret URL and the captcha id, and calls first.
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ans, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(ans.Solution), "forged") {
		t.Fatalf("answer %s came from a forged callback", ans.Solution)
	}
	if st := api.Stats(); st.ResCalls != 2 {
		t.Errorf("%d res.php calls, want 2: one (not ready) after the forged callback, one after the service's", st.ResCalls)
	}
}

// TestPingbackCaptchaAI: CaptchaAI calls back too, with a GET carrying id
// and code in the query; the client sends its callback URL there, and each
// answer costs one res.php fetch, no polls.
func TestPingbackCaptchaAI(t *testing.T) {
	t.Parallel()
	api, c, pb, _ := pingbackSetup(t, fakeapi.ServiceCaptchaAI, true, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 5 {
		if _, err := c.Solve(ctx, solver.Request{Method: "base64", Params: map[string]string{"body": pngB64}}); err != nil {
			t.Fatal(err)
		}
	}
	st := api.Stats()
	if st.Pingbacks != 5 || pb.Callbacks() != 5 {
		t.Errorf("%d callbacks sent, %d received, want 5", st.Pingbacks, pb.Callbacks())
	}
	if st.ResCalls != 5 {
		t.Errorf("%d res.php calls for 5 solves, want 5: one fetch per callback, no polls", st.ResCalls)
	}
}

// TestPingbackListenerAnswersGET: the listener takes a CaptchaAI callback
// (GET, id and code in the query) on the secret path and answers 200 "OK",
// as CaptchaAI's handlers do; without an id it answers 400.
func TestPingbackListenerAnswersGET(t *testing.T) {
	t.Parallel()
	pb, err := solver.NewPingback("http://127.0.0.1:1/cb")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(pb)
	defer srv.Close()
	path := pb.URL()[len("http://127.0.0.1:1"):]
	resp, err := http.Get(srv.URL + path + "?" + url.Values{"id": {"7"}, "code": {"03AGdBq2"}}.Encode())
	if err != nil {
		t.Fatal(err)
	}
	body := make([]byte, 16)
	n, _ := resp.Body.Read(body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body[:n]) != "OK" {
		t.Errorf("GET callback: HTTP %d %q, want 200 \"OK\"", resp.StatusCode, body[:n])
	}
	if pb.Callbacks() != 1 {
		t.Errorf("%d callbacks accepted, want 1", pb.Callbacks())
	}
	resp, err = http.Get(srv.URL + path + "?code=x")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Errorf("callback without id: HTTP %d, want 400", resp.StatusCode)
	}
}

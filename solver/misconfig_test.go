package solver_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// TestSubmitSpacingStrictestOfClients: two clients of one key with 100 ms
// and 50 ms intervals share one limiter spaced by the stricter 100 ms, as
// the emulator sees the calls arrive.
func TestSubmitSpacingStrictestOfClients(t *testing.T) {
	t.Parallel()
	const gap = 100 * time.Millisecond
	var arr arrivals
	b := setup(t, opts{client: solver.Config{MinSubmitInterval: gap}, wrap: arr.wrap})
	loose, err := solver.NewClient(solver.Config{BaseURL: b.srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: gap / 2})
	if err != nil {
		t.Fatal(err)
	}
	unlimited, err := solver.NewClient(solver.Config{BaseURL: b.srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	submitAll(t, []*solver.Client{loose, b.client, unlimited}, 6)
	if st := b.api.Stats(); st.InCalls != 6 || st.Submitted != 6 {
		t.Fatalf("emulator saw %d in.php calls, %d submitted; want 6, 6", st.InCalls, st.Submitted)
	}
	// The looser client's 50 ms would take 250 ms from first call to last,
	// not 500.
	noSooner(t, start, arr.sorted(), func(k int) time.Duration { return time.Duration(k) * gap })
}

// TestWrongBaseURLIsFatal: a base URL without the API under it (the
// emulator answers 404 off /in.php and /res.php) fails every call alike, so
// the error is Fatal, which stops the worker instead of dead-lettering the
// queue task by task.
func TestWrongBaseURLIsFatal(t *testing.T) {
	t.Parallel()
	b := setup(t, opts{})
	c, err := solver.NewClient(solver.Config{BaseURL: b.srv.URL + "/v2", APIKey: fakeapi.TestKey, MinSubmitInterval: -1})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Solve(ctxT(t), turnstile("https://a.example/"))
	if solver.CodeOf(err) != "HTTP_404" || solver.ClassOf(err) != retry.Fatal {
		t.Errorf("Solve against a wrong path: %v, want HTTP_404 (fatal)", err)
	}
}

// TestDefaultClientRefusesRedirects: the client the package builds itself
// follows no redirect, to another host or its own, so the form with the key
// is never re-sent; the redirect fails as a Fatal HTTP_307/308 naming the
// target's host only.
func TestDefaultClientRefusesRedirects(t *testing.T) {
	t.Parallel()
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		w.Write([]byte(`{"status":1,"request":"100"}`))
	}))
	t.Cleanup(other.Close)
	var moved atomic.Int64
	origin := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.HasPrefix(r.URL.Path, "/away/"):
			http.Redirect(w, r, other.URL+"/secret/path?q=1", http.StatusTemporaryRedirect)
		case strings.HasPrefix(r.URL.Path, "/moved/"):
			moved.Add(1)
			w.Write([]byte(`{"status":1,"request":"100"}`))
		default:
			http.Redirect(w, r, "/moved"+r.URL.Path, http.StatusPermanentRedirect)
		}
	}))
	t.Cleanup(origin.Close)

	for _, tt := range []struct{ base, code string }{
		{origin.URL + "/away", "HTTP_307"},
		{origin.URL, "HTTP_308"},
	} {
		c, err := solver.NewClient(solver.Config{BaseURL: tt.base, APIKey: fakeapi.TestKey})
		if err != nil {
			t.Fatal(err)
		}
		_, err = c.Balance(ctxT(t))
		if solver.CodeOf(err) != tt.code || solver.ClassOf(err) != retry.Fatal {
			t.Errorf("%s: Balance: %v, want %s (fatal)", tt.base, err, tt.code)
		}
		if err != nil && strings.Contains(err.Error(), "/secret/path") {
			t.Errorf("error %q quotes the redirect's full URL", err)
		}
	}
	if n, m := elsewhere.Load(), moved.Load(); n != 0 || m != 0 {
		t.Errorf("redirects followed: %d requests to the other host, %d to the moved path; want none", n, m)
	}
}

package solver_test

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// ThreadsInfo reads both shapes the gateway writes (classic.WriteThreadsInfo)
// and a request held as a string; anything else tells no plan.
func TestThreadsInfoReadsBothReadingsAndNothingElse(t *testing.T) {
	t.Parallel()
	want := classic.ThreadsInfo{Threads: 15, WorkingThreads: 4, FreeThreads: 11}
	cases := []struct {
		name  string
		reply func(w http.ResponseWriter)
		ok    bool
	}{
		{"fields at the top", func(w http.ResponseWriter) { classic.WriteThreadsInfo(w, false, want) }, true},
		{"json=1, beside status 1", func(w http.ResponseWriter) { classic.WriteThreadsInfo(w, true, want) }, true},
		{"request as an object only", func(w http.ResponseWriter) {
			w.Write([]byte(`{"status":1,"request":{"threads":15,"working_threads":4,"free_threads":11}}`))
		}, true},
		{"request as a string", func(w http.ResponseWriter) {
			w.Write([]byte(`{"status":1,"request":"{\"threads\":15,\"working_threads\":4,\"free_threads\":11}"}`))
		}, true},
		{"an error code", func(w http.ResponseWriter) { w.Write([]byte(`{"status":0,"request":"ERROR_BAD_PARAMETERS"}`)) }, false},
		{"plain text", func(w http.ResponseWriter) { w.Write([]byte("OK|15")) }, false},
		{"no threads", func(w http.ResponseWriter) { w.Write([]byte(`{"threads":0,"working_threads":0}`)) }, false},
		{"a page", func(w http.ResponseWriter) {
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte("<html>not found</html>"))
		}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				require.NoError(t, r.ParseForm())
				require.Equal(t, "/res.php", r.URL.Path)
				require.Equal(t, classic.ActionThreadsInfo, r.PostForm.Get("action"))
				tc.reply(w)
			}))
			t.Cleanup(srv.Close)
			c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: "k3y-of-the-account"})
			require.NoError(t, err)
			ti, err := c.ThreadsInfo(context.Background())
			if !tc.ok {
				require.Error(t, err)
				require.NotContains(t, err.Error(), "k3y-of-the-account")
				return
			}
			require.NoError(t, err)
			require.Equal(t, want, ti)
		})
	}
}

// A learning client on CaptchaAI asks the service for its plan only with
// Config.PlanFromService: without it (the default) no threadsinfo call is
// made, and the window learns from refusals as before.
func TestThreadsInfoOnlyWhenAsked(t *testing.T) {
	t.Parallel()
	for _, ask := range []bool{false, true} {
		api := fakeapi.New(fakeapi.Config{Threads: 4, SolveTime: map[string]fakeapi.Range{
			fakeapi.KindTurnstile: {Min: 10 * time.Millisecond, Max: 20 * time.Millisecond}}})
		var asked atomic.Int64
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ParseForm() == nil && r.Form.Get("action") == classic.ActionThreadsInfo {
				asked.Add(1)
			}
			api.ServeHTTP(w, r)
		}))
		t.Cleanup(srv.Close)
		c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
			Service: solver.CaptchaAI, LearnPlan: true, PlanFromService: ask, Timing: solver.Timing{Scale: 0.01}})
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = c.Solve(ctx, solver.Request{Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
		cancel()
		require.NoError(t, err)
		require.Equal(t, 1, api.Stats().Submitted, "paid once")
		if ask {
			require.EqualValues(t, 1, asked.Load(), "PlanFromService: the plan read before the first captcha")
			require.Equal(t, 4, c.PlanToldThreads())
		} else {
			require.Zero(t, asked.Load(), "no threadsinfo call by default")
			require.False(t, c.PlanTold())
		}
	}
}

// PlanAccount names an account by its key without the key: the same key
// the same name, another key another, 16 hex characters holding no part
// of the key, and not the key's bare SHA-256 (the prefix keeps it apart).
func TestPlanAccountNamesTheKeyWithoutIt(t *testing.T) {
	client := func(key string) *solver.Client {
		c, err := solver.NewClient(solver.Config{BaseURL: "http://127.0.0.1:1", APIKey: key})
		require.NoError(t, err)
		return c
	}
	const other = "fedcba9876543210fedcba9876543210"
	a, b := client(fakeapi.TestKey).PlanAccount(), client(other).PlanAccount()
	require.Equal(t, a, client(fakeapi.TestKey).PlanAccount())
	require.NotEqual(t, a, b)
	require.Regexp(t, `^[0-9a-f]{16}$`, a)
	bare := sha256.Sum256([]byte(fakeapi.TestKey))
	require.NotEqual(t, hex.EncodeToString(bare[:8]), a)
	for i := 0; i+8 <= len(fakeapi.TestKey); i++ {
		require.NotContains(t, a, fakeapi.TestKey[i:i+8])
	}
}

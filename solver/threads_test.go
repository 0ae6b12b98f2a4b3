package solver_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
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

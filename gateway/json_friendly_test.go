package gateway_test

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
)

// Friendly Captcha through the JSON dialect, as Anti-Captcha documents its
// two types (anti-captcha.com/apidoc/task-types/FriendlyCaptchaTaskProxyless
// and FriendlyCaptchaTask: websiteURL and websiteKey, the second with the
// proxy fields; the solution's token) and CapSolver its own
// (docs.capsolver.com/guide/captcha/FriendlyCaptcha: FriendlyCaptchaTaskProxyless,
// solution.token): createTask, a worker, the emulator, getTaskResult. Each
// task ends ready with its token, is a friendly_captcha of the catalogue,
// and is paid once.
func TestJSONFriendlyCaptcha(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	tasks := []map[string]any{
		// anti-captcha.com's request example.
		{"type": "FriendlyCaptchaTaskProxyless", "websiteURL": "https://website.com", "websiteKey": "FCMDESUD3M34857N"},
		// Its proxy variant.
		{"type": "FriendlyCaptchaTask", "websiteURL": "https://website.com/", "websiteKey": "FCMDESUD3M34857N",
			"proxyType": "http", "proxyAddress": "8.8.8.8", "proxyPort": 8080, "proxyLogin": "user", "proxyPassword": "pass"},
		// CapSolver's request example.
		{"type": "FriendlyCaptchaTaskProxyless", "websiteURL": "https://www.yourtarget.com/", "websiteKey": "FBTMEAFCK477GTRU"},
	}
	ids := make([]int64, len(tasks))
	for i, task := range tasks {
		ids[i] = b.create(t, alice, task)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for i, task := range tasks {
		r := b.result(t, alice, ids[i])
		require.Equal(t, createtask.StatusReady, r.str("status"), "%v: %v", task["type"], r)
		sol, ok := r["solution"].(map[string]any)
		require.True(t, ok, "solution %v", r["solution"])
		require.NotEmpty(t, sol["token"], "solution.token in %v", sol)
		out, err := b.env.Client.Wait(ctx, "alice-"+strconv.FormatInt(ids[i], 10))
		require.NoError(t, err)
		require.Equal(t, captcha.MethodFriendly, out.Method)
		want, err := createtask.Solution(out.Method, out.Solution, out.UserAgent)
		require.NoError(t, err)
		got, err := json.Marshal(sol)
		require.NoError(t, err)
		require.JSONEq(t, string(want), string(got))
	}
	st := b.env.Emulator.Stats()
	require.Equal(t, len(tasks), st.Submitted, "each task paid once")
	require.Len(t, st.PerTask, len(tasks), "three tasks, the proxy one apart: %v", st.PerTask)
	for k, n := range st.PerTask {
		require.True(t, strings.HasPrefix(k, captcha.MethodFriendly+" "), k)
		require.Equal(t, 1, n, "%s paid once", k)
	}
}

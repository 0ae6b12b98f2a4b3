package solver_test

import (
	"bytes"
	"io"
	"net/http"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
)

// The service answers ERROR_NO_SUCH_CAPCHA_ID once for a captcha it
// accepted moments ago. The code says the id is unknown or expired there
// (2captcha.com/api-docs/error-codes, error 16: "You've provided incorrect
// captcha ID in the request"), which a captcha well within its lifetime is
// not: services answer it for a moment (a replica behind the one that took
// the submission). The captcha is polled once more before it is given up,
// and its answer comes: one in.php, one captcha paid. A caller that
// submits again on an unknown id, as the worker does, pays twice without.
func TestOneUnknownReplyForALiveCaptchaPaysOnce(t *testing.T) {
	t.Parallel()
	var told atomic.Bool
	once := func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			form, _ := url.ParseQuery(string(body))
			if r.URL.Path == "/res.php" && form.Get("action") == "get" && told.CompareAndSwap(false, true) {
				if form.Get("json") == "1" {
					_, _ = io.WriteString(w, `{"status":0,"request":"ERROR_NO_SUCH_CAPCHA_ID"}`)
				} else {
					_, _ = io.WriteString(w, "ERROR_NO_SUCH_CAPCHA_ID")
				}
				return
			}
			next.ServeHTTP(w, r)
		})
	}
	b := setup(t, opts{wrap: once, client: solver.Config{Timing: solver.Timing{Scale: 0.001, Fixed: true}}})

	var a solver.Answer
	var err error
	for range 2 { // the worker's way: an unknown captcha is submitted again
		if a, err = b.client.Solve(ctxT(t), turnstile("https://shop.example/")); !solver.CaptchaUnknown(err) {
			break
		}
	}
	require.NoError(t, err)
	require.NotEmpty(t, a.Solution)
	require.True(t, told.Load(), "the service said it once")
	st := b.api.Stats()
	require.Equal(t, 1, st.InCalls, "one in.php")
	require.Equal(t, 1, st.Submitted, "paid once")
}

package metrics

import (
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/captcha"
)

func TestExposition(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	c := r.Counter("x_total", "Things\ncounted, with a \\.", "method", "code")
	g := r.Gauge("x_in_flight", "Now.")
	h := r.Histogram("x_seconds", "Durations.", []float64{1, 5, math.Inf(1), 1}, "method")

	c.Inc("turnstile", `ERROR_"quoted"`)
	c.Add(2, "base64", "OK")
	c.Add(-1, "base64", "OK") // ignored: counters only go up
	g.Set(3)
	g.Add(-1)
	h.Observe(0.5, "turnstile")
	h.Observe(1, "turnstile") // on a bound: counted in le="1"
	h.Observe(7, "turnstile")

	var b strings.Builder
	require.NoError(t, r.WriteText(&b))
	require.Equal(t, `# HELP x_in_flight Now.
# TYPE x_in_flight gauge
x_in_flight 2
# HELP x_seconds Durations.
# TYPE x_seconds histogram
x_seconds_bucket{method="turnstile",le="1"} 2
x_seconds_bucket{method="turnstile",le="5"} 2
x_seconds_bucket{method="turnstile",le="+Inf"} 3
x_seconds_sum{method="turnstile"} 8.5
x_seconds_count{method="turnstile"} 3
# HELP x_total Things\ncounted, with a \\.
# TYPE x_total counter
x_total{code="ERROR_\"quoted\"",method="turnstile"} 1
x_total{code="OK",method="base64"} 2
`, b.String())

	rec := httptest.NewRecorder()
	r.Handler().ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "/metrics", nil))
	require.True(t, strings.HasPrefix(rec.Header().Get("Content-Type"), ContentType), rec.Header().Get("Content-Type"))
	require.Equal(t, b.String(), rec.Body.String())
}

func TestRegistryRejectsBadNames(t *testing.T) {
	t.Parallel()
	r := NewRegistry()
	require.Panics(t, func() { r.Counter("bad-name", "") })
	require.Panics(t, func() { r.Histogram("h", "", nil, "le") })
	r.Counter("dup", "")
	require.Panics(t, func() { r.Counter("dup", "") })
	c := r.Counter("two_labels", "", "a", "b")
	require.Panics(t, func() { c.Inc("only-one") })
}

func TestAnswerCode(t *testing.T) {
	t.Parallel()
	for body, want := range map[string]string{
		`{"status":1,"request":"123"}`:                "OK",
		`{"status":1,"request":123}`:                  "OK",
		`{"status":0,"request":"CAPCHA_NOT_READY"}`:   "CAPCHA_NOT_READY",
		`{"status":0,"request":"ERROR_ZERO_BALANCE"}`: "ERROR_ZERO_BALANCE",
		"OK|123":               "OK",
		"ERROR_WRONG_USER_KEY": "ERROR_WRONG_USER_KEY",
		"ERROR: 1001":          "ERROR: 1001",
		"<html>502</html>":     "BAD_REPLY",
		`{"status":`:           "BAD_REPLY",
	} {
		require.Equal(t, want, answerCode([]byte(body)), body)
	}
	require.Equal(t, "OTHER", codeLabel("error with spaces and https://page.example/x"))
	require.Equal(t, "other", methodLabel("no-such-method"))
	require.Equal(t, "unknown", methodLabel(""))
	// Every method of the catalogue is its own series: a method added to
	// the catalogue needs no second list here.
	for _, m := range captcha.Methods() {
		require.Equal(t, m, methodLabel(m))
	}
}

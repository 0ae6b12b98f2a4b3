package provider_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
)

// TestTasksClientReports: the JSON client reports an answer with the call
// its provider documents for the method (Anti-Captcha's, the dialect's
// own: reportIncorrectRecaptcha and reportCorrectRecaptcha for reCAPTCHA,
// reportIncorrectImageCaptcha for an image), each recorded by the
// emulator once, and nothing paid for a report; a verdict the provider
// has no call for (a good image) is ERROR_REPORT_NOT_RECORDED, sent
// nowhere. Through a Set, ReportOn reaches it by the outcome's provider.
func TestTasksClientReports(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{})
	c := tasksClient(t, url, fakeapi.TestKey)
	page := "https://shop.example/login"
	recaptcha := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-site", "pageurl": page}}
	image := solver.Request{Method: "base64", Params: map[string]string{"body": "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="}}
	r1, err := c.Solve(t.Context(), recaptcha)
	require.NoError(t, err)
	r2, err := c.Solve(t.Context(), image)
	require.NoError(t, err)
	recaptcha.Params = map[string]string{"googlekey": "6Le-site", "pageurl": page + "/2"}
	r3, err := c.Solve(t.Context(), recaptcha)
	require.NoError(t, err)

	require.NoError(t, c.Report(t.Context(), "userrecaptcha", r1.CaptchaID, false))
	require.NoError(t, c.Report(t.Context(), "base64", r2.CaptchaID, false))
	err = c.Report(t.Context(), "base64", r2.CaptchaID, true)
	require.Equal(t, classic.CodeReportNotRecorded, solver.CodeOf(err), "%v", err)

	set, err := provider.New(provider.Config{Members: []provider.Member{{Client: c, Entry: provider.Entry{Name: "anti", Dialect: provider.Tasks,
		BaseURL: url, KeyEnv: "K", Billing: spareBilling, Methods: []string{"userrecaptcha", "base64"}, Role: provider.Primary}}}})
	require.NoError(t, err)
	require.NoError(t, set.ReportOn(t.Context(), "anti", "userrecaptcha", r3.CaptchaID, true))

	st := api.Stats()
	require.Equal(t, 2, st.ReportsBad, "the recaptcha's and the image's")
	require.Equal(t, 1, st.ReportsGood, "the other recaptcha's, through the Set")
	require.Equal(t, 3, st.Submitted, "three captchas paid, none for a report")
	for k, n := range st.PerTask {
		require.Equal(t, 1, n, "task %s paid once", k)
	}
}

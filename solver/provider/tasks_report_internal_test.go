package provider

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestReportPathPerProvider: each provider's documented report call, by
// its host, method and verdict; "" where it documents none.
func TestReportPathPerProvider(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		base, method string
		good         bool
		want         string
	}{
		{"https://api.anti-captcha.com", "userrecaptcha", false, "reportIncorrectRecaptcha"},
		{"https://api.anti-captcha.com", "userrecaptcha", true, "reportCorrectRecaptcha"},
		{"https://api.anti-captcha.com", "base64", false, "reportIncorrectImageCaptcha"},
		{"https://api.anti-captcha.com", "hcaptcha", false, "reportIncorrectHcaptcha"},
		{"https://api.anti-captcha.com", "turnstile", false, ""},
		{"https://api.anti-captcha.com", "base64", true, ""},
		{"https://api.capmonster.cloud", "turnstile", false, "reportIncorrectTokenCaptcha"},
		{"https://api.capmonster.cloud", "post", false, "reportIncorrectImageCaptcha"},
		{"https://api.capmonster.cloud", "userrecaptcha", true, ""},
		{"https://api.2captcha.com", "turnstile", true, "reportCorrect"},
		{"https://api.2captcha.com", "base64", false, "reportIncorrect"},
		{"https://api.capsolver.com", "userrecaptcha", false, "feedbackTask"},
		{"http://127.0.0.1:8090", "userrecaptcha", false, "reportIncorrectRecaptcha"},
	} {
		require.Equal(t, tc.want, reportPath(tc.base, tc.method, tc.good), "%s %s good=%v", tc.base, tc.method, tc.good)
	}
}

package provider_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/provider"
)

// TestBreakProvidersFileNamesTheEntry breaks a providers file's second
// entry in ways the JSON decoder catches (an unknown field, a field of the
// wrong type) and in ways Validate does: every refusal names the entry and
// the field, and none repeats a key the operator put in the wrong place.
func TestBreakProvidersFileNamesTheEntry(t *testing.T) {
	t.Parallel()
	const key = "abcdef0123456789abcdef0123456789" // the shape of a CaptchaAI or 2captcha key
	first := `{"name": "plan", "dialect": "classic", "base_url": "https://ocr.captchaai.com", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary"}`
	cases := []struct {
		name, second, want string
	}{
		{"unknown field holding the key", `{"name": "spare", "api_key": "` + key + `"}`, `providers[1] (spare): json: unknown field "api_key"`},
		{"threads a string", `{"name": "spare", "billing": {"threads": "5"}}`, `providers[1] (spare): json: cannot unmarshal string into Go struct field Billing.billing.threads`},
		{"methods a string", `{"name": "spare", "methods": "base64"}`, `providers[1] (spare): json: cannot unmarshal string into Go struct field Entry.methods`},
		{"price a string", `{"name": "spare", "billing": {"per_1000": {"base64": "NaN"}}}`, `providers[1] (spare): json: cannot unmarshal string`},
		{"price beyond float64", `{"name": "spare", "billing": {"per_1000": {"base64": 1e400}}}`, `providers[1] (spare): json: cannot unmarshal number 1e400`},
		{"unnamed and unknown", `{"nmae": "spare"}`, `providers[1]: json: unknown field "nmae"`},
		{"key_env holding a key", `{"name": "spare", "dialect": "classic", "base_url": "https://2captcha.com", "key_env": "` + key + `", "billing": {"threads": 5}, "role": "fallback"}`, `providers[1] (spare): key_env: `},
		{"key_env holding a dashed key", `{"name": "spare", "dialect": "classic", "base_url": "https://2captcha.com", "key_env": "CAP-` + key + `", "billing": {"threads": 5}, "role": "fallback"}`, `providers[1] (spare): key_env: `},
		{"base_url naming in.php", `{"name": "spare", "dialect": "classic", "base_url": "https://2captcha.com/in.php", "key_env": "K", "billing": {"threads": 5}, "role": "fallback"}`, `providers[1] (spare): base_url: ends in the endpoint in.php`},
		{"base_url naming createTask", `{"name": "spare", "dialect": "tasks", "base_url": "https://api.anti-captcha.com/createTask", "key_env": "K", "billing": {"per_1000": {"base64": 1}}, "methods": ["base64"], "role": "fallback"}`, `providers[1] (spare): base_url: ends in the endpoint createTask`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := provider.Parse([]byte(`{"providers": [` + first + `, ` + tc.second + `]}`))
			require.Error(t, err)
			require.Contains(t, err.Error(), tc.want)
			require.NotContains(t, err.Error(), key, "the key in a message")
		})
	}
}

// TestBreakProvidersFileDuplicatesAndSize: one account named twice (the
// same base_url and key) would be failed over to while it is out and its
// plan counted twice; a file of thousands of providers would start a
// client, a key check and a probe for each. Both are refused.
func TestBreakProvidersFileDuplicatesAndSize(t *testing.T) {
	t.Parallel()
	entry := func(name, url, keyEnv string) string {
		return `{"name": "` + name + `", "dialect": "classic", "base_url": "` + url + `", "key_env": "` + keyEnv +
			`", "billing": {"threads": 5}, "role": "primary"}`
	}
	_, err := provider.Parse([]byte(`{"providers": [` + entry("a", "https://ocr.captchaai.com", "K") + `, ` +
		entry("b", "https://OCR.captchaai.com/", "K") + `]}`))
	require.ErrorContains(t, err, "providers[1] (b): base_url, key: the same account as providers[0] (a)")
	_, err = provider.Parse([]byte(`{"providers": [` + entry("a", "https://ocr.captchaai.com", "K") + `, ` +
		entry("b", "https://ocr.captchaai.com", "K2") + `]}`))
	require.NoError(t, err, "two accounts of one service")

	var entries []string
	for i := range provider.MaxProviders + 1 {
		entries = append(entries, entry(fmt.Sprintf("p%d", i), "https://ocr.captchaai.com", fmt.Sprintf("K%d", i)))
	}
	_, err = provider.Parse([]byte(`{"providers": [` + strings.Join(entries, ", ") + `]}`))
	require.ErrorContains(t, err, fmt.Sprintf("%d providers: at most %d", provider.MaxProviders+1, provider.MaxProviders))
}

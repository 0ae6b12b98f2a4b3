package provider_test

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/provider"
)

// validFile is a providers file every case below breaks in one field.
func validFile() provider.File {
	return provider.File{Providers: []provider.Entry{
		{Name: "plan", Dialect: provider.Classic, BaseURL: "https://ocr.captchaai.com", KeyEnv: "CAPTCHAAI_API_KEY",
			Billing: provider.Billing{Threads: 15, PlanPrice: 45}, Role: provider.Primary},
		{Name: "spare", Dialect: provider.Classic, BaseURL: "https://2captcha.com", KeyFile: "/etc/captchaq/2captcha.key",
			Methods: []string{"userrecaptcha", "base64"},
			Billing: provider.Billing{Per1000: map[string]float64{"userrecaptcha": 2.99, "base64": 0.5}}, Role: provider.Fallback,
			MaxInFlight: 200},
	}}
}

func parse(t *testing.T, f provider.File) error {
	t.Helper()
	b, err := json.Marshal(f)
	require.NoError(t, err)
	_, err = provider.Parse(b)
	return err
}

func TestProvidersFileValid(t *testing.T) {
	t.Parallel()
	require.NoError(t, parse(t, validFile()))
}

// TestProvidersFileEveryFieldWrong breaks each field of a valid file, one
// at a time: each is refused, naming the entry and the field.
func TestProvidersFileEveryFieldWrong(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name    string
		entry   int // -1: the file as a whole
		field   string
		breakIt func(f *provider.File)
	}{
		{"name empty", 0, "name", func(f *provider.File) { f.Providers[0].Name = "" }},
		{"name with a space", 0, "name", func(f *provider.File) { f.Providers[0].Name = "my plan" }},
		{"name twice", 1, "name", func(f *provider.File) { f.Providers[1].Name = "plan" }},
		{"dialect empty", 0, "dialect", func(f *provider.File) { f.Providers[0].Dialect = "" }},
		{"dialect unknown", 1, "dialect", func(f *provider.File) { f.Providers[1].Dialect = "soap" }},
		{"service on a tasks provider", 1, "service", func(f *provider.File) {
			f.Providers[1].Dialect, f.Providers[1].Service = provider.Tasks, "2captcha"
		}},
		{"base_url empty", 0, "base_url", func(f *provider.File) { f.Providers[0].BaseURL = "" }},
		{"base_url relative", 0, "base_url", func(f *provider.File) { f.Providers[0].BaseURL = "ocr.captchaai.com" }},
		{"base_url ftp", 1, "base_url", func(f *provider.File) { f.Providers[1].BaseURL = "ftp://2captcha.com" }},
		{"base_url with credentials", 1, "base_url", func(f *provider.File) { f.Providers[1].BaseURL = "https://u:p@2captcha.com" }},
		{"base_url with a query", 0, "base_url", func(f *provider.File) { f.Providers[0].BaseURL = "https://ocr.captchaai.com?key=x" }},
		{"service unknown", 0, "service", func(f *provider.File) { f.Providers[0].Service = "anticaptcha" }},
		{"no key", 0, "key_env", func(f *provider.File) { f.Providers[0].KeyEnv = "" }},
		{"both keys", 1, "key_file", func(f *provider.File) { f.Providers[1].KeyEnv = "TWOCAPTCHA_KEY" }},
		{"key_env holds a key", 0, "key_env", func(f *provider.File) { f.Providers[0].KeyEnv = "0123456789abcdef-0123" }},
		{"methods unknown", 1, "methods[1]", func(f *provider.File) { f.Providers[1].Methods[1] = "base65" }},
		{"methods not offered", 1, "methods[0]", func(f *provider.File) { f.Providers[1].Methods[0] = "cloudflare_challenge" }},
		{"threads negative", 0, "billing.threads", func(f *provider.File) { f.Providers[0].Billing.Threads = -1 }},
		{"no billing", 0, "billing.threads, per_1000", func(f *provider.File) { f.Providers[0].Billing = provider.Billing{} }},
		{"both billings", 0, "billing.threads, per_1000", func(f *provider.File) {
			f.Providers[0].Billing.Per1000 = map[string]float64{"base64": 1}
		}},
		{"plan_price negative", 0, "billing.plan_price", func(f *provider.File) { f.Providers[0].Billing.PlanPrice = -45 }},
		{"plan_price without a plan", 1, "billing.plan_price", func(f *provider.File) { f.Providers[1].Billing.PlanPrice = 10 }},
		{"price negative", 1, `billing.per_1000["base64"]`, func(f *provider.File) { f.Providers[1].Billing.Per1000["base64"] = -0.5 }},
		{"price infinite", 1, `billing.per_1000["base64"]`, func(f *provider.File) { f.Providers[1].Billing.Per1000["base64"] = math.Inf(1) }},
		{"price missing", 1, `billing.per_1000["base64"]`, func(f *provider.File) { delete(f.Providers[1].Billing.Per1000, "base64") }},
		{"price of a method not given", 1, `billing.per_1000["turnstile"]`, func(f *provider.File) {
			f.Providers[1].Billing.Per1000["turnstile"] = 1.45
		}},
		{"role empty", 0, "role", func(f *provider.File) { f.Providers[0].Role = "" }},
		{"role unknown", 1, "role", func(f *provider.File) { f.Providers[1].Role = "backup" }},
		{"overflow on a plan", 0, "role", func(f *provider.File) {
			f.Providers[0].Role, f.Providers[1].Role = provider.Overflow, provider.Primary
		}},
		{"max_in_flight negative", 1, "max_in_flight", func(f *provider.File) { f.Providers[1].MaxInFlight = -1 }},
		{"max_in_flight past the most", 1, "max_in_flight", func(f *provider.File) { f.Providers[1].MaxInFlight = provider.MaxMaxInFlight + 1 }},
		{"max_in_flight on a plan", 0, "max_in_flight", func(f *provider.File) { f.Providers[0].MaxInFlight = 20 }},
		{"no primary", -1, "primary", func(f *provider.File) { f.Providers[0].Role = provider.Fallback }},
		{"no providers", -1, "no providers", func(f *provider.File) { f.Providers = nil }},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			f := validFile()
			tc.breakIt(&f)
			var err error
			if strings.Contains(tc.name, "infinite") {
				// JSON has no infinity: Validate sees what a Go caller gives.
				err = f.Validate()
			} else {
				err = parse(t, f)
			}
			require.Error(t, err)
			msg := err.Error()
			if tc.entry >= 0 {
				e := f.Providers[tc.entry]
				want := "providers[" + string(rune('0'+tc.entry)) + "]"
				if e.Name != "" {
					want += " (" + e.Name + ")"
				}
				require.Contains(t, msg, want+": ", "the entry")
			}
			require.Contains(t, msg, tc.field, "the field")
		})
	}
}

// TestProvidersFileShape refuses unknown fields and trailing data, naming
// them.
func TestProvidersFileShape(t *testing.T) {
	t.Parallel()
	_, err := provider.Parse([]byte(`{"providers": [{"name": "a", "api_key": "secret"}]}`))
	require.ErrorContains(t, err, `unknown field "api_key"`)
	_, err = provider.Parse([]byte(`{"providers": []} {}`))
	require.ErrorContains(t, err, "data after the JSON object")
}

// TestProvidersKey reads the key from the variable or the file, and says
// which is missing without a key in the error.
func TestProvidersKey(t *testing.T) {
	e := validFile().Providers[0]
	e.KeyEnv = "CAPTCHAQ_TEST_PROVIDER_KEY"
	t.Setenv(e.KeyEnv, "")
	_, err := e.Key()
	require.ErrorContains(t, err, "provider plan: key_env CAPTCHAQ_TEST_PROVIDER_KEY: not set")
	t.Setenv(e.KeyEnv, " abc123 \n")
	k, err := e.Key()
	require.NoError(t, err)
	require.Equal(t, "abc123", k)

	e.KeyEnv, e.KeyFile = "", filepath.Join(t.TempDir(), "key")
	_, err = e.Key()
	require.ErrorContains(t, err, "provider plan: key_file")
	require.NoError(t, os.WriteFile(e.KeyFile, []byte("\n"), 0o600))
	_, err = e.Key()
	require.ErrorContains(t, err, "empty")
}

// TestProvidersExampleFile checks the example the docs show.
func TestProvidersExampleFile(t *testing.T) {
	t.Parallel()
	_, err := provider.Load("../../testdata/providers.json")
	require.NoError(t, err)
}

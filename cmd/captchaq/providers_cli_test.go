package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
)

// A worker given a providers file with a field wrong refuses it, naming
// the entry and the field, before it connects to anything; a key missing
// from its variable is named by the variable, never shown.
func TestWorkerRefusesABadProvidersFile(t *testing.T) {
	t.Setenv("CAPTCHAQ_NATS", "nats://127.0.0.1:1") // nothing listens: a worker that went on would wait
	dir := t.TempDir()
	b, err := os.ReadFile("../../testdata/providers.json")
	require.NoError(t, err)
	for _, tc := range []struct{ name, from, to, want string }{
		{"role", `"role": "fallback"`, `"role": "backup"`, `providers[1] (2captcha): role "backup"`},
		{"price", `"userrecaptcha": 2.99`, `"userrecaptcha": -2.99`, `providers[1] (2captcha): billing.per_1000["userrecaptcha"]`},
		{"key", `"key_env": "TWOCAPTCHA_API_KEY"`, `"key_env": "CAPTCHAQ_TEST_UNSET_KEY"`, `provider 2captcha: key_env CAPTCHAQ_TEST_UNSET_KEY: not set`},
	} {
		path := filepath.Join(dir, tc.name+".json")
		require.NoError(t, os.WriteFile(path, []byte(strings.Replace(string(b), tc.from, tc.to, 1)), 0o600))
		t.Setenv("CAPTCHAAI_API_KEY", "a-key-for-the-test-0123")
		t.Setenv("TWOCAPTCHA_API_KEY", "another-key-for-the-test")
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		var out, errOut strings.Builder
		code := realMain(ctx, []string{"worker", "--providers", path}, &out, &errOut)
		cancel()
		require.NotZero(t, code, tc.name)
		require.Contains(t, errOut.String(), tc.want, tc.name)
		require.NotContains(t, errOut.String(), "key-for-the-test", "no key in the error")
	}
}

// `run --providers` solves through the file's providers: with the primary
// answering HTTP 500 to everything, the tasks go to the fallback, and the
// run ends with the spend table, whose cost is the fallback's bill.
func TestRunWithProviders(t *testing.T) {
	plan := fakeapi.New(fakeapi.Config{TimeScale: 0.01, BurstLimit: 1 << 20, Faults: fakeapi.Faults{Outage: true}})
	planURL, stopPlan, err := fakeapi.ServeLocal(plan)
	require.NoError(t, err)
	t.Cleanup(stopPlan)
	spare := fakeapi.New(fakeapi.Config{TimeScale: 0.01, BurstLimit: 1 << 20, Service: fakeapi.Service2Captcha,
		Price: map[string]float64{"userrecaptcha": 2.99}})
	spareURL, stopSpare, err := fakeapi.ServeLocal(spare)
	require.NoError(t, err)
	t.Cleanup(stopSpare)
	dir := t.TempDir()
	file := filepath.Join(dir, "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"providers": [
 {"name": "plan", "dialect": "classic", "base_url": "`+planURL+`", "service": "captchaai", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary"},
 {"name": "spare", "dialect": "classic", "base_url": "`+spareURL+`", "service": "2captcha", "key_env": "SPARE_KEY",
  "methods": ["userrecaptcha"], "billing": {"per_1000": {"userrecaptcha": 2.99}}, "role": "fallback"}]}`), 0o600))
	tasks := filepath.Join(dir, "tasks.jsonl")
	var lines []string
	for i := range 5 {
		lines = append(lines, `{"id": "p-`+itoa(i)+`", "method": "userrecaptcha", "params": {"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/`+itoa(i)+`"}}`)
	}
	require.NoError(t, os.WriteFile(tasks, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	t.Setenv("PLAN_KEY", fakeapi.TestKey)
	t.Setenv("SPARE_KEY", fakeapi.TestKey)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out, errOut strings.Builder
	code := realMain(ctx, []string{"run", "--providers", file, "--poll-scale", "0.01", "--json", tasks}, &out, &errOut)
	require.Zero(t, code, errOut.String())
	require.Equal(t, 5, strings.Count(out.String(), `"provider":"spare"`), out.String())
	require.Equal(t, 5, spare.Stats().Submitted)
	require.Zero(t, plan.Stats().Submitted)
	require.Regexp(t, `spare\s+total\s+5\s+0\s+0\.01495\n`, errOut.String(), "the spend table: 5 × 2.99/1000 = %.5f", spare.Stats().Spent)
}

package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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
	tasks := recaptchaTasks(t, dir, "p", 5)
	t.Setenv("PLAN_KEY", fakeapi.TestKey)
	t.Setenv("SPARE_KEY", fakeapi.TestKey)
	out, errOut := runProviders(t, file, tasks)
	require.Equal(t, 5, strings.Count(out, `"provider":"spare"`), out)
	require.Equal(t, 5, spare.Stats().Submitted)
	require.Zero(t, plan.Stats().Submitted)
	require.Regexp(t, `spare\s+total\s+5\s+0\s+0\.01495\n`, errOut, "the spend table: 5 × 2.99/1000 = %.5f", spare.Stats().Spent)
}

// `run --providers` with a provider of the JSON dialect served by a
// `captchaq fakeapi` process: every task is solved there, at the cost the
// emulator reports, and the emulator's own bill at its exit says each was
// paid once.
func TestRunWithJSONProviderOnFakeAPI(t *testing.T) {
	dir := t.TempDir()
	api := startProc(t, nil, "fakeapi", "--addr", "127.0.0.1:0", "--addr-file", filepath.Join(dir, "addr"), "--speed", "100")
	api.waitLine("fakeapi listening on http://", 30*time.Second)
	addr, err := os.ReadFile(filepath.Join(dir, "addr"))
	require.NoError(t, err)
	keyFile := filepath.Join(dir, "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(fakeapi.TestKey+"\n"), 0o600))
	file := filepath.Join(dir, "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(`{"providers": [
 {"name": "fake-json", "dialect": "tasks", "base_url": "http://`+strings.TrimSpace(string(addr))+`", "key_file": "`+keyFile+`",
  "methods": ["userrecaptcha"], "billing": {"per_1000": {"userrecaptcha": 1.0}}, "role": "primary"}]}`), 0o600))
	tasks := recaptchaTasks(t, dir, "j", 5)
	out, _ := runProviders(t, file, tasks)
	require.Equal(t, 5, strings.Count(out, `"provider":"fake-json"`), out)
	require.NoError(t, api.cmd.Process.Signal(syscall.SIGINT))
	require.Equal(t, 0, api.wait(30*time.Second), api.output())
	// The emulator's price is DefaultPricePer1000, 1.00 per 1000.
	require.Contains(t, api.output(), "fakeapi: 5 captchas accepted, 0 refunded as unsolvable; 0.00500 spent")
	require.Contains(t, api.output(), "fakeapi: no task was paid for more than once")
}

// recaptchaTasks writes a tasks file of n reCAPTCHAs, ids prefix-0, …,
// each on a page of its own, in dir, and returns its path.
func recaptchaTasks(t *testing.T, dir, prefix string, n int) string {
	t.Helper()
	var lines []string
	for i := range n {
		lines = append(lines, `{"id": "`+prefix+`-`+itoa(i)+`", "method": "userrecaptcha", "params": {"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/`+itoa(i)+`"}}`)
	}
	tasks := filepath.Join(dir, "tasks.jsonl")
	require.NoError(t, os.WriteFile(tasks, []byte(strings.Join(lines, "\n")+"\n"), 0o600))
	return tasks
}

// runProviders runs `captchaq run --providers file` on the tasks file
// tasks, within two minutes, and returns its output and its log.
func runProviders(t *testing.T, file, tasks string) (out, log string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var o, e strings.Builder
	code := realMain(ctx, []string{"run", "--providers", file, "--poll-scale", "0.01", "--json", tasks}, &o, &e)
	require.Zero(t, code, e.String())
	return o.String(), e.String()
}

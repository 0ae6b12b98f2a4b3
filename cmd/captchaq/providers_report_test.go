package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/solver/provider"
	"github.com/captchaq/captchaq/stream"
)

// TestReportByTaskIDGoesToItsProvider: `captchaq report bad TASK_ID` of a
// task a worker with providers solved on its fallback (a 2captcha
// emulator) reports it there, with --providers, and never to the service
// of the report's own flags (a CaptchaAI emulator), where that captcha id
// names nothing of this task's, or another account's captcha; without
// --providers it refuses, naming the provider. Nothing is paid for a
// report: each emulator's bill is counted.
//
// Failed before: the report went to the flags' service, whatever the
// outcome's provider, and was recorded there against a captcha it never
// solved.
func TestReportByTaskIDGoesToItsProvider(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	fast := map[string]fakeapi.Range{fakeapi.KindRecaptcha: {Min: time.Millisecond, Max: 2 * time.Millisecond}}
	plan, planURL := emulatorURL(t, fakeapi.Config{SolveTime: fast})
	spare, spareURL := emulatorURL(t, fakeapi.Config{SolveTime: fast, Service: fakeapi.Service2Captcha})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	file := filepath.Join(t.TempDir(), "providers.json")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`{"providers": [
 {"name": "captchaai", "dialect": "classic", "base_url": %q, "service": "captchaai", "key_env": "PLAN_KEY", "billing": {"threads": 5}, "role": "primary"},
 {"name": "2captcha", "dialect": "classic", "base_url": %q, "service": "2captcha", "key_env": "SPARE_KEY", "methods": ["userrecaptcha"],
  "billing": {"per_1000": {"userrecaptcha": 2.99}}, "role": "fallback"}]}`, planURL, spareURL)), 0o600))
	f, err := provider.Load(file)
	require.NoError(t, err)
	// The worker's set solves on the file's fallback only, as while the
	// primary is out.
	e := f.Providers[1]
	e.Role = provider.Primary
	c, err := solver.NewClient(solver.Config{BaseURL: spareURL, APIKey: fakeapi.TestKey, Service: solver.TwoCaptcha, Timing: solver.Timing{Scale: 0.001}})
	require.NoError(t, err)
	set, err := provider.New(provider.Config{Members: []provider.Member{{Entry: e, Client: c}}})
	require.NoError(t, err)
	startWorkerWith(t, ctx, natsURL, "", stream.WorkerConfig{Threads: 2, Solver: set})
	out, err := client.Solve(ctx, stream.Task{ID: "demo-001", Method: "userrecaptcha",
		Params: stream.Params{"googlekey": "6Le-wvkSAAAAAPBMRTvw0Q4Muexq9bi0DJwx_mJ-", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	require.Equal(t, "2captcha", out.Provider)

	keys := append([]string{"PLAN_KEY=" + fakeapi.TestKey, "SPARE_KEY=" + fakeapi.TestKey}, keyEnv...)
	r := captchaqEnv(t, natsURL, keys, "report", "bad", "demo-001", "--solver-url", planURL)
	t.Logf("without --providers: exit %d, %q %q", r.code, r.stdout, r.stderr)
	require.Zero(t, plan.Stats().InCalls+plan.Stats().ResCalls, "a report sent to a service that did not solve the captcha")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.stderr, "provider 2captcha")
	require.Contains(t, r.stderr, "--providers")

	r = captchaqEnv(t, natsURL, keys, "report", "bad", "demo-001", "--providers", file)
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "reported captcha "+out.CaptchaID+" (task demo-001) to provider 2captcha as bad\n", r.stdout)
	require.NotContains(t, r.stdout+r.stderr, fakeapi.TestKey)
	require.Equal(t, 1, spare.Stats().ReportsBad, "reported to the provider that solved it, once")
	require.Zero(t, plan.Stats().InCalls+plan.Stats().ResCalls, "nothing sent to the plan's service")
	require.Equal(t, 1, spare.Stats().Submitted, "one captcha paid, none for a report")
	require.Zero(t, plan.Stats().Submitted)
}

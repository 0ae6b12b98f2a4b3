package provider_test

import (
	"context"
	"encoding/json"
	"errors"
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
	"github.com/captchaq/captchaq/stream/streamtest"
)

// jsonEmulator is the project's emulator over real HTTP, solving every
// kind in 5–10 ms, at spareBilling's prices: here spoken to in the JSON
// dialect.
func jsonEmulator(t *testing.T, cfg fakeapi.Config) (*fakeapi.Server, string) {
	t.Helper()
	cfg.SolveTime = map[string]fakeapi.Range{}
	for _, k := range solver.Kinds() {
		cfg.SolveTime[k] = fakeapi.Range{Min: 5 * time.Millisecond, Max: 10 * time.Millisecond}
	}
	cfg.Price, cfg.Seed = spareBilling.Per1000, 7
	api := fakeapi.New(cfg)
	url, stop, err := fakeapi.ServeLocal(api)
	require.NoError(t, err)
	t.Cleanup(stop)
	return api, url
}

func tasksClient(t *testing.T, url, key string) *provider.TasksClient {
	t.Helper()
	c, err := provider.NewTasksClient(provider.TasksConfig{BaseURL: url, APIKey: key, Scale: 0.001})
	require.NoError(t, err)
	return c
}

// TestTasksClientOnTheEmulator: the JSON client solves every kind the
// dialect has a type for against the emulator's JSON dialect, each paid
// once, at the emulator's price, which the answer carries as reported.
func TestTasksClientOnTheEmulator(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{})
	c := tasksClient(t, url, fakeapi.TestKey)
	page := "https://shop.example/login"
	img := "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg=="
	reqs := map[string]solver.Request{
		"recaptcha v2": {Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-site", "pageurl": page}},
		"recaptcha v3": {Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-v3", "pageurl": page, "version": "v3", "action": "login", "min_score": "0.7"}},
		"enterprise":   {Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-ent", "pageurl": page, "enterprise": "1", "data-s": "s-value"}},
		"turnstile":    {Method: "turnstile", Params: map[string]string{"sitekey": "0x4AAA", "pageurl": page, "action": "login"}},
		"geetest v3":   {Method: "geetest", Params: map[string]string{"gt": "81388ea1fc187e0c335c0a8907ff2625", "challenge": "c1a2b3", "pageurl": page}},
		"geetest v4":   {Method: "geetest", Params: map[string]string{"gt": "e392e1d7fd421dc63325744d5a2b9c73", "version": "4", "pageurl": page}},
		"hcaptcha":     {Method: "hcaptcha", Params: map[string]string{"sitekey": "10000000-ffff", "pageurl": page}},
		"image":        {Method: "base64", Params: map[string]string{"body": img, "numeric": "1"}},
	}
	for name, req := range reqs {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		ans, err := c.Solve(ctx, req)
		cancel()
		require.NoError(t, err, name)
		require.NotEmpty(t, ans.Solution, name)
		require.NotEmpty(t, ans.CaptchaID, name)
		require.Equal(t, provider.CostReported, ans.CostBasis, name)
		require.InDelta(t, spareBilling.Per1000[req.Method]/1000+defaultPrice(req.Method), ans.Cost, 1e-12, name)
		switch req.Method {
		case "geetest":
			var obj map[string]string
			require.NoError(t, json.Unmarshal(ans.Solution, &obj), name)
			if req.Params["version"] == "4" {
				require.Equal(t, req.Params["gt"], obj["captcha_id"], name)
				require.NotEmpty(t, obj["pass_token"], name)
			} else {
				require.Equal(t, "c1a2b3", obj["geetest_challenge"], name)
				require.NotEmpty(t, obj["geetest_validate"], name)
			}
		case "turnstile":
			require.NotEmpty(t, ans.UserAgent, name)
		}
	}
	st := api.Stats()
	require.Equal(t, len(reqs), st.Submitted, "paid once each")
	require.Equal(t, len(reqs), st.Solved)
	require.Empty(t, st.Repeated())
	// Three reCAPTCHAs and an image at spareBilling, four at the emulator's default.
	require.InDelta(t, 3*2.99/1000+1.0/1000+4*fakeapi.DefaultPricePer1000/1000, st.Spent, 1e-9, "the bill")
}

// defaultPrice is what the emulator charges for a method spareBilling has
// no price for.
func defaultPrice(method string) float64 {
	if _, ok := spareBilling.Per1000[method]; ok {
		return 0
	}
	return fakeapi.DefaultPricePer1000 / 1000
}

// TestTasksClientEmulatorRefusals: the emulator's refusals reach the JSON
// client as the classic codes of the same meaning, classed as a per-solve
// service's, and are billed as the emulator bills them: a wrong key and an
// outage pay nothing; a dead task is paid and refunded.
func TestTasksClientEmulatorRefusals(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{})
	req := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "6Le-site", "pageurl": "https://shop.example/"}}
	solve := func(c *provider.TasksClient, r solver.Request) error {
		ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
		defer cancel()
		_, err := c.Solve(ctx, r)
		return err
	}
	code := func(err error) string {
		var se *solver.Error
		require.True(t, errors.As(err, &se), "%v", err)
		return se.Code
	}

	err := solve(tasksClient(t, url, "ffffffffffffffffffffffffffffffff"), req)
	require.Equal(t, "ERROR_KEY_DOES_NOT_EXIST", code(err))
	require.NotContains(t, err.Error(), "ffffffffffffffffffffffffffffffff", "no key in the error")
	require.Zero(t, api.Stats().Submitted)

	c := tasksClient(t, url, fakeapi.TestKey)
	dead := solver.Request{Method: "userrecaptcha", Params: map[string]string{"googlekey": "unsolvable", "pageurl": "https://shop.example/"}}
	err = solve(c, dead)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", code(err), "the dead task's own code")
	st := api.Stats()
	require.Equal(t, 1, st.Submitted)
	require.Equal(t, 1, st.Refunded)
	require.Zero(t, st.Spent, "refunded")

	api.SetFaults(fakeapi.Faults{Outage: true})
	err = solve(c, req)
	require.Equal(t, "HTTP_500", code(err))
	since, _ := c.Unreachable()
	require.False(t, since.IsZero(), "the outage is seen")
	api.SetFaults(fakeapi.Faults{})
	require.NoError(t, solve(c, req))
	since, _ = c.Unreachable()
	require.True(t, since.IsZero(), "and its end")
	require.Equal(t, 2, api.Stats().Submitted, "the outage paid nothing")
}

// TestProvidersFileJSONOnEmulator: a providers file naming a provider of
// the JSON dialect whose base URL is the emulator's (as `captchaq fakeapi`
// serves it) runs a worker's tasks there, each paid once, its outcome
// carrying the provider and the cost the emulator reported.
func TestProvidersFileJSONOnEmulator(t *testing.T) {
	t.Parallel()
	api, url := jsonEmulator(t, fakeapi.Config{})
	keyFile := filepath.Join(t.TempDir(), "key")
	require.NoError(t, os.WriteFile(keyFile, []byte(fakeapi.TestKey+"\n"), 0o600))
	f, err := provider.Parse(fmt.Appendf(nil, `{"providers": [{"name": "fake-json", "dialect": "tasks", "base_url": %q,
		"key_file": %q, "methods": ["userrecaptcha", "base64"], "billing": {"per_1000": {"userrecaptcha": 2.99, "base64": 1.0}},
		"role": "primary"}]}`, url, keyFile))
	require.NoError(t, err)
	set, err := provider.Open(f, solver.Config{Timing: solver.Timing{Scale: 0.001}}, provider.Config{})
	require.NoError(t, err)
	env := streamtest.Start(t, streamtest.WithWorkers(0))
	env.StartWorker(stream.WorkerConfig{Solver: set, Threads: 4})

	const n = 6
	outs := waitAll(t, env.Client, submit(t, env.Client, "crawler", 0, n))
	for _, o := range outs {
		require.Equal(t, stream.StatusSolved, o.Status)
		require.Equal(t, "fake-json", o.Provider)
		require.InDelta(t, 2.99/1000, o.Cost, 1e-12)
	}
	st := api.Stats()
	require.Equal(t, n, st.Submitted, "paid once each")
	require.Empty(t, st.Repeated())
	require.InDelta(t, n*2.99/1000, st.Spent, 1e-9)
}

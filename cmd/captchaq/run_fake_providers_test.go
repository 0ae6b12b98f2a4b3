package main

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// `run --fake-providers` on a fresh clone (no key, no providers file)
// solves through two emulated providers, a CaptchaAI plan of 3 threads and
// a per-solve 2captcha overflow: both solve some of the tasks, the run
// ends with the spend table, and the 2captcha emulator's bill, printed at
// the end, is the table's 2captcha total, with no task paid twice.
func TestRunWithFakeProviders(t *testing.T) {
	t.Setenv("CAPTCHAAI_API_KEY", "")
	t.Setenv("CAPTCHAQ_SOLVER_URL", "")
	tasks := recaptchaTasks(t, t.TempDir(), "fp", 20)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var o, e strings.Builder
	code := realMain(ctx, []string{"run", "--fake-providers", "--json", tasks}, &o, &e)
	require.Zero(t, code, e.String())
	out, log := o.String(), e.String()
	plan, spare := strings.Count(out, `"provider":"captchaai"`), strings.Count(out, `"provider":"2captcha"`)
	require.Equal(t, 20, plan+spare, out)
	require.Positive(t, plan, "the plan solved some")
	require.Positive(t, spare, "the overflow solved some: %s", log) // 16 threads on a plan of 3: it fills
	total := regexp.MustCompile(`2captcha\s+total\s+(\d+)\s+0\s+([0-9.]+)\n`).FindStringSubmatch(log)
	require.NotNil(t, total, log)
	require.Equal(t, itoa(spare), total[1])
	bill := regexp.MustCompile(`fakeapi 2captcha: (\d+) captchas accepted, 0 refunded as unsolvable; ([0-9.]+) spent`).FindStringSubmatch(log)
	require.NotNil(t, bill, log)
	require.Equal(t, total[1], bill[1], "one captcha paid per task solved there")
	require.Equal(t, total[2], strings.TrimRight(strings.TrimRight(bill[2], "0"), "."), "the spend is the bill")
	require.Contains(t, log, "fakeapi 2captcha: no task was paid for more than once")
	require.Contains(t, log, "fakeapi captchaai: no task was paid for more than once")
}

package main

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
)

// The emulator's test key left in CAPTCHAAI_API_KEY (the README's export,
// with only CAPTCHAQ_SOLVER_URL unset, or copied into a new shell) with the
// service's default URL is refused before anything is sent: run said
// "real API: ocr.captchaai.com (… each solve is paid for)", which is
// untrue of a key the service refuses, and sent that key there. HTTPS goes
// to a proxy that refuses every connection, so nothing leaves the machine.
func TestEmulatorKeyIsNotSentToTheRealService(t *testing.T) {
	t.Parallel()
	// The default --solver-url: the test's environment has no CAPTCHAQ_SOLVER_URL.
	env := []string{"CAPTCHAAI_API_KEY=" + fakeapi.TestKey,
		"HTTPS_PROXY=http://127.0.0.1:1", "HTTP_PROXY=http://127.0.0.1:1", "NO_PROXY=127.0.0.1,localhost"}
	for _, args := range [][]string{
		{"run", "../../testdata/tasks.jsonl"},
		{"balance"},
	} {
		r := captchaqEnv(t, "nats://127.0.0.1:1", env, args...)
		require.Equal(t, 2, r.code, "%v: %s%s", args, r.stdout, r.stderr)
		require.Contains(t, r.stderr, "the emulator's test key", "%v", args)
		require.NotContains(t, r.stderr, "real API", "%v", args)
	}
}

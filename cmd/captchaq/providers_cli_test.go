package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
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

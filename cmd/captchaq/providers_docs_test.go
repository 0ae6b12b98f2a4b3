package main

import (
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestProvidersWalkthroughRunsAsWritten runs docs/providers.md's
// walkthrough as TestREADMEShellBlocks runs the README's (no key, HTTPS
// refused, the server's port moved through the environment): the
// recaptchas are solved on the plan's emulator, then, with it gone, on the
// per-solve one, and neither was paid twice.
func TestProvidersWalkthroughRunsAsWritten(t *testing.T) {
	t.Parallel()
	_, dir := readmeWorkdir(t)
	page, err := os.ReadFile(filepath.Join("..", "..", "docs", "providers.md"))
	require.NoError(t, err)
	blocks := shellBlocks(string(page), "sh")
	require.Len(t, blocks, 1, "docs/providers.md's walkthrough")
	natsAddr := freeAddr(t)
	got, err, hung := runDocBlocksBounded(t, dir, readmeScript(t, blocks, nil), 3*time.Minute,
		"CAPTCHAQ_LISTEN="+natsAddr, "CAPTCHAQ_NATS=nats://"+natsAddr)
	require.False(t, hung)
	require.NoError(t, err)
	require.Contains(t, got, `"provider":"captchaai"`)
	require.Contains(t, got, `"provider":"2captcha"`)
	require.Regexp(t, regexp.MustCompile(`(?m)^2captcha\s+total\s+[1-9]`), got, "the spend table")
	require.Equal(t, 2, countLines(got, "fakeapi: no task was paid for more than once"), "each emulator says so as it stops")
	require.NotContains(t, got, "real API", "nothing reaches the paid service")
}

func countLines(s, line string) int {
	return len(regexp.MustCompile(`(?m)^`+regexp.QuoteMeta(line)+`$`).FindAllString(s, -1))
}

package main

import (
	"context"
	"io"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
)

// TestPlanEarlyByDefault: a quota told with default flags gives threads back
// when their captchas are probably solved (the plan stream says so to every
// worker); --plan-early=false keeps captchas at the service within the
// quota.
func TestPlanEarlyByDefault(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx := context.Background()
	early := func() string {
		nc, err := nats.Connect(url, nats.UserInfo("admin", rolePasswords["admin"]))
		require.NoError(t, err)
		defer nc.Close()
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		s, err := js.Stream(ctx, "CAPTCHA_PLAN")
		require.NoError(t, err)
		return s.CachedInfo().Config.Metadata["captchaq.plan_early"]
	}
	require.NoError(t, runInit(ctx, append([]string{"--nats", url, "--plan-threads", "5"}, as("admin")...), io.Discard, io.Discard))
	require.Equal(t, "true", early(), "init --plan-threads 5")
	require.NoError(t, runInit(ctx, append([]string{"--nats", url, "--plan-threads", "5", "--plan-early=false"}, as("admin")...), io.Discard, io.Discard))
	require.NotEqual(t, "true", early(), "init --plan-threads 5 --plan-early=false")
}

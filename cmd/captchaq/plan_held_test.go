package main

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// Two operators run `captchaq init --plan-threads 2` and `--plan-threads
// 4` at the same moment: both succeed, and each says which quota holds,
// its own or, when the other's was recorded after it, the other's by
// name; the one that holds once both ended is the one an init said last
// of the two (`captchaq stats` shows it).
func TestInitTellsWhichPlanQuotaHolds(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	ctx := context.Background()
	nc, err := nats.Connect(url, nats.UserInfo("admin", rolePasswords["admin"]))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	adm, err := stream.NewAdmin(nc, stream.AdminConfig{})
	require.NoError(t, err)
	var out strings.Builder
	require.NoError(t, runInit(ctx, append([]string{"--nats", url, "--plan-threads", "3"}, as("admin")...), &out, &out))
	require.Contains(t, out.String(), "\nplan-wide quota: 3 threads\n", out.String())
	quotas := [2]int{2, 4}
	for round := range 10 {
		var outs [2]strings.Builder
		errs := make(chan error, 2)
		for i, n := range quotas {
			go func() {
				errs <- runInit(ctx, append([]string{"--nats", url, "--plan-threads", fmt.Sprint(n)}, as("admin")...), &outs[i], &outs[i])
			}()
		}
		for range 2 {
			require.NoError(t, <-errs, "round %d", round)
		}
		held, err := adm.PlanThreads(ctx)
		require.NoError(t, err)
		require.Contains(t, quotas, held, "round %d", round)
		told := 0
		for i, n := range quotas {
			own := fmt.Sprintf("\nplan-wide quota: %d threads\n", n)
			other := fmt.Sprintf("\nplan-wide quota: %d threads, not the %d threads asked: another operator set it at the same moment, after this one\n", held, n)
			s := outs[i].String()
			require.True(t, strings.Contains(s, own) || (held != n && strings.Contains(s, other)), "round %d, init --plan-threads %d said:\n%s", round, n, s)
			if strings.Contains(s, fmt.Sprintf("quota: %d threads", held)) {
				told++
			}
		}
		require.NotZero(t, told, "round %d: neither init named the quota held, %d: %q, %q", round, held, outs[0].String(), outs[1].String())
	}
	out.Reset()
	require.NoError(t, runInit(ctx, append([]string{"--nats", url, "--plan-threads", "0"}, as("admin")...), &out, &out))
	require.Contains(t, out.String(), "\nplan-wide quota: none\n", out.String())
}

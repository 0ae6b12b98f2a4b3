package main

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// `captchaq init --plan-threads` typed wrong is refused before anything
// is connected to, naming the flag: a negative other than -1 ("leave the
// quota as it is") was taken as -1, and init said the topology was ready
// and nothing of the quota, exit 0.
func TestInitRefusesAPlanThreadsTypedWrong(t *testing.T) {
	t.Parallel()
	for _, v := range []string{"-5", "-2", "x", "99999999999999999999"} {
		var out strings.Builder
		// No server listens there: a refusal comes before the connection.
		err := runInit(context.Background(), []string{"--nats", "nats://127.0.0.1:1", "--plan-threads", v}, &out, &out)
		require.Error(t, err, "--plan-threads %s", v)
		require.Contains(t, err.Error(), "plan-threads", "--plan-threads %s", v)
		require.NotContains(t, err.Error(), "127.0.0.1", "--plan-threads %s: refused before connecting", v)
	}
}

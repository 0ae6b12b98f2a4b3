package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// A worker process pointed where nothing listens: its log and /readyz say
// what failed and where, and the queued task spends no attempt.
func TestWorkerSaysTheServiceIsUnreachable(t *testing.T) {
	t.Parallel()
	natsURL, _, client := listeningServer(t, stream.Topology{})
	nowhere, maddr := freeAddr(t), freeAddr(t)
	w := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", "http://"+nowhere, "--poll-scale", "0.01",
		"--metrics-addr", maddr, "--outage-warn-after", "1s")
	w.waitLine("worker started", 30*time.Second)
	ctx := t.Context()
	_, err := client.Submit(ctx, stream.Task{ID: "nowhere1", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/"}})
	require.NoError(t, err)
	w.waitLine("connection refused to "+nowhere+": is the service's URL right?", 30*time.Second)
	var body string
	require.Eventually(t, func() bool {
		var code int
		body, code = httpGet(t, "http://"+maddr+"/readyz")
		return code == http.StatusServiceUnavailable && strings.Contains(body, "connection refused to "+nowhere)
	}, 10*time.Second, 20*time.Millisecond, "/readyz says the service is unreachable: %s", body)
	require.Contains(t, body, "--solver-url http://"+nowhere)
	w.waitLine("still unreachable", 30*time.Second)
	tr, err := client.Trace(ctx, "nowhere1")
	require.NoError(t, err)
	snoozes := 0
	for _, e := range tr {
		require.NotEqual(t, "dead", e.Kind, "%+v", tr)
		if e.Kind == "snooze" {
			require.Zero(t, e.Attempt, "no attempt spent: %+v", e)
			snoozes++
		}
	}
	require.NotZero(t, snoozes, "%+v", tr)
}

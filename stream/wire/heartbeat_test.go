package wire

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A heartbeat carries the worker's service outage and its captchas held
// at the service; one of a worker whose service answers says nothing of
// an outage, in JSON or in words.
func TestHeartbeatCarriesTheServiceOutage(t *testing.T) {
	t.Parallel()
	since := time.Date(2026, 3, 2, 10, 14, 5, 0, time.UTC)
	w := WorkerInfo{Name: "pool-2", ServiceDownSince: since, ServiceDown: "connection refused to ocr.captchaai.com", HeldAtService: 3}
	b, err := json.Marshal(w)
	require.NoError(t, err)
	var back WorkerInfo
	require.NoError(t, json.Unmarshal(b, &back))
	require.Equal(t, "service unreachable since 2026-03-02T10:14:05Z (3 captchas held at the service)", back.ServiceState())
	require.Equal(t, w.ServiceDown, back.ServiceDown)

	up, err := json.Marshal(WorkerInfo{Name: "pool-1", HeldAtService: 2})
	require.NoError(t, err)
	require.NotContains(t, string(up), "service_down")
	require.Contains(t, string(up), `"held_at_service":2`)
	require.Empty(t, WorkerInfo{Name: "pool-1"}.ServiceState())
}

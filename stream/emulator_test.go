package stream

import (
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// emulator starts the solving service's emulator on 127.0.0.1 and returns it
// with a real HTTP client for it whose polling runs at scale (0.001: a 5-s
// first poll becomes 5 ms).
func emulator(t *testing.T, cfg fakeapi.Config, scale float64) (*fakeapi.Server, *solver.Client) {
	t.Helper()
	if cfg.BurstLimit == 0 {
		cfg.BurstLimit = 1 << 20
	}
	api := fakeapi.New(cfg)
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	// A patient local deadline (half a minute of real time, whatever the
	// scale): a solve held up by a loaded machine (the race detector, other
	// tests) must not time out as LOCAL_TIMEOUT where the test checks
	// what the service answered.
	patience := map[string]time.Duration{}
	for kind := range fakeapi.DefaultSolveTimes() {
		patience[kind] = time.Duration(float64(30*time.Second) / scale)
	}
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: scale, MaxWait: patience}})
	require.NoError(t, err)
	return api, c
}

// fixed is a solve time that does not vary.
func fixed(d time.Duration) fakeapi.Range { return fakeapi.Range{Min: d, Median: d, Max: d} }

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
	// The local deadline is ten hours of production time (36 s at scale
	// 0.001): the production deadlines scaled (120–180 ms) are shorter than
	// a few polls take on a loaded machine, and no test here tests them. An
	// hour (7.2 s at the plan test's 0.002) was met under CI's load, and a
	// solve given up locally hands its plan thread back while the service
	// still works on the captcha: one over the plan at the emulator.
	patient := map[string]time.Duration{}
	for _, k := range solver.Kinds() {
		patient[k] = 10 * time.Hour
	}
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: scale, MaxWait: patient}})
	require.NoError(t, err)
	return api, c
}

// fixed is a solve time that does not vary.
func fixed(d time.Duration) fakeapi.Range { return fakeapi.Range{Min: d, Median: d, Max: d} }

package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
)

// run builds its solving client from the same flags as worker: a spacing
// between in.php calls given on the command line holds (it was registered
// but dropped, so run submitted at the default 100 ms).
func TestRunKeepsTheSubmitSpacingItIsGiven(t *testing.T) {
	t.Parallel()
	api := fakeapi.New(fakeapi.Config{TimeScale: 0.001, BurstLimit: 1 << 20})
	var mu sync.Mutex
	var submits []time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/in.php") {
			mu.Lock()
			submits = append(submits, time.Now())
			mu.Unlock()
		}
		api.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)

	file := filepath.Join(t.TempDir(), "tasks.jsonl")
	var lines strings.Builder
	for _, id := range []string{"sp-1", "sp-2", "sp-3"} {
		lines.WriteString(`{"id":"` + id + `","method":"turnstile","params":{"sitekey":"k","pageurl":"https://a.example/x"}}` + "\n")
	}
	require.NoError(t, os.WriteFile(file, []byte(lines.String()), 0o600))
	const spacing = 700 * time.Millisecond
	r := captchaqEnv(t, "", keyEnv, "run", "--json", "--solver-url", srv.URL, "--poll-scale", "0.001",
		"--submit-interval", spacing.String(), file)
	require.Equal(t, 0, r.code, r.stderr)

	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, len(submits), 3)
	for i := 1; i < len(submits); i++ {
		// The spacing is a floor: a loaded machine only widens it.
		require.GreaterOrEqual(t, submits[i].Sub(submits[i-1]), spacing-50*time.Millisecond, "in.php calls %d and %d", i-1, i)
	}
}

// run's help names the log level it really starts at.
func TestRunHelpNamesItsLogLevel(t *testing.T) {
	t.Parallel()
	r := captchaqEnv(t, "", nil, "run", "--help")
	require.Equal(t, 0, r.code, r.stderr)
	require.Regexp(t, `--log-level +\[CAPTCHAQ_LOG_LEVEL\]\n +log level: debug, info, warn or error \(default warn\)`, r.stdout)
}

package stream

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// After a batch, once the tokens' lifetime is over, neither the stream nor
// the logs hold a token, a page URL's path or query, or the API key; the
// outcomes without tokens stay for the audit.
func TestTokensAndPageURLsDoNotOutliveTheirUse(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	logs := &logbuf.Buffer{}
	log := slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{solver.KindTurnstile: fixed(20 * time.Millisecond)}})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	sc, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.002}, Logger: log})
	require.NoError(t, err)
	b.startWorker(t, WorkerConfig{Solver: sc, Threads: 4, Logger: log,
		TokenLifetimes: map[string]time.Duration{"turnstile": time.Second}})

	tasks := make([]Task, 10)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("priv%d", i))
		tasks[i].Params["pageurl"] = fmt.Sprintf("https://shop.example/account/secret-path-%d?email=jane%d@example.org", i, i)
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	var tokens []string
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		tokens = append(tokens, o.Text())
	}))
	require.Len(t, tokens, 10)
	dir := b.ns.JetStreamConfig().StoreDir
	// The scan can see them while they live: it reads what is on disk.
	require.Eventually(t, func() bool { return len(storeHolds(t, dir, tokens)) > 0 }, 10*time.Second, 20*time.Millisecond,
		"the store's files never showed a live token: the scan below would prove nothing")

	// The tokens leave with their lifetime (per-message TTL); the finished
	// task messages, which held the page URLs, are deleted.
	gone := func(filter string) func() bool {
		return func() bool {
			info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(filter))
			return err == nil && len(info.State.Subjects) == 0
		}
	}
	require.Eventually(t, gone(subjectResults+".>"), 15*time.Second, 50*time.Millisecond, "tokens outlived their lifetime")
	require.Eventually(t, gone(subjectAllTasks), 15*time.Second, 50*time.Millisecond, "finished task messages stayed")

	var stored strings.Builder
	err = scanFrom(ctx, b.client.s, []string{SubjectRoot + ".>"}, 0, false, func(m jetstream.Msg) (bool, error) {
		fmt.Fprintf(&stored, "%s %v %s\n", m.Subject(), m.Headers(), m.Data())
		return false, nil
	})
	require.NoError(t, err)
	for name, text := range map[string]string{"stream": stored.String(), "logs": logs.String()} {
		for _, tok := range tokens {
			require.NotContains(t, text, tok, name)
		}
		require.NotContains(t, text, "secret-path", name)
		require.NotContains(t, text, "email", name)
		require.NotContains(t, text, fakeapi.TestKey, name)
		require.Contains(t, text, "shop.example", "%s: the page host is kept", name)
	}
	require.Contains(t, stored.String(), `"kind":"solved"`, "the outcome without its token stays for the audit")

	// Not only gone from the stream: gone from the store's files, where a
	// deleted or expired message's bytes would stay until compaction.
	secrets := append(append([]string{}, tokens...), "secret-path", "jane0@example.org")
	require.Eventually(t, func() bool { return len(storeHolds(t, dir, secrets)) == 0 }, 15*time.Second, 50*time.Millisecond,
		"the store's files still hold %d of the tokens and URLs", len(storeHolds(t, dir, secrets)))

	// A waiter that comes too late learns that clearly.
	out, err := b.client.Wait(ctx, "priv0")
	require.ErrorIs(t, err, ErrTokenExpired)
	require.Equal(t, StatusSolved, out.Status)
	require.Empty(t, out.Solution)

	// So do batch waiters (submit --wait run again on the same file).
	expired := 0
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.ErrorIs(t, err, ErrTokenExpired)
		require.Equal(t, StatusSolved, o.Status)
		expired++
	}))
	require.Equal(t, len(receipts), expired)
}

// storeHolds returns which of needles appear in any file under dir.
func storeHolds(t *testing.T, dir string, needles []string) []string {
	t.Helper()
	found := map[string]bool{}
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil // compacted away meanwhile
		}
		if err != nil {
			return err
		}
		for _, n := range needles {
			if bytes.Contains(b, []byte(n)) {
				found[n] = true
			}
		}
		return nil
	})
	require.NoError(t, err)
	return slices.Sorted(maps.Keys(found))
}

// A worker that stops before the tokens it stored expire leaves them to
// the token eraser that `captchaq server` runs: once they expire it erases
// them from the store's files.
func TestTokenEraserErasesWhatStoppedWorkersLeft(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	w := b.startWorker(t, WorkerConfig{Solver: countingSolver(new(atomic.Int32)), Threads: 4,
		TokenLifetimes: map[string]time.Duration{"turnstile": 2 * time.Minute}})
	tasks := make([]Task, 8)
	for i := range tasks {
		tasks[i] = turnstileTask(fmt.Sprintf("left%d", i))
	}
	receipts, err := b.client.SubmitAll(ctx, tasks)
	require.NoError(t, err)
	var tokens []string
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) {
		require.NoError(t, err)
		tokens = append(tokens, o.Text())
	}))
	w.stop()
	require.NoError(t, <-w.done)
	w.done <- nil
	dir := b.ns.JetStreamConfig().StoreDir
	require.Eventually(t, func() bool { return len(storeHolds(t, dir, tokens)) == len(tokens) }, 10*time.Second, 20*time.Millisecond)

	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	n, err := EraseExpiredTokens(ctx, js, Topology{}, time.Now())
	require.NoError(t, err)
	require.Zero(t, n, "live tokens stay")
	require.Len(t, storeHolds(t, dir, tokens), len(tokens))
	n, err = EraseExpiredTokens(ctx, js, Topology{}, time.Now().Add(2*time.Minute+time.Second))
	require.NoError(t, err)
	require.Equal(t, len(tokens), n)
	require.Empty(t, storeHolds(t, dir, tokens))
}

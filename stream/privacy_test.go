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
	"github.com/captchaq/captchaq/stream/wire"
)

// After a batch, once the tokens' lifetime is over, neither the stream nor
// the logs hold a token, a page URL's path or query, or the API key; the
// outcomes without tokens stay for the audit. The store's files never hold a
// token; on an encrypted store (the default) they never hold a page URL
// either, and on a plaintext one the workers erase each finished task's.
func TestTokensAndPageURLsDoNotOutliveTheirUse(t *testing.T) {
	t.Parallel()
	t.Run("encrypted store", func(t *testing.T) {
		t.Parallel()
		testTokensAndPageURLs(t, setup(t, Topology{}), true)
	})
	t.Run("plaintext store", func(t *testing.T) {
		t.Parallel()
		testTokensAndPageURLs(t, setupPlaintext(t, Topology{}), false)
	})
}

func testTokensAndPageURLs(t *testing.T, b *bundle, encrypted bool) {
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
	if encrypted {
		// What the stream holds is on disk, and none of it readable.
		require.Eventually(t, func() bool { return blockBytes(t, dir) > 0 }, 15*time.Second, 20*time.Millisecond, "nothing reached the store's files")
		require.Empty(t, storeHolds(t, dir, []string{"priv", "shop.example", "secret-path", "turnstile"}), "an encrypted store's files hold text in the clear")
	} else {
		// The scan reads what is on disk: it sees what the audit trail keeps.
		require.NotEmpty(t, storeHolds(t, dir, []string{"priv0", "shop.example"}), "the scan below would prove nothing")
	}
	// While they live, the tokens are nowhere in the store's files: the
	// token stream keeps them in memory.
	require.Empty(t, storeHolds(t, dir, tokens), "live tokens on disk")

	// The tokens leave the token stream with their lifetime (per-message
	// TTL); the finished task messages, which held the page URLs, are
	// deleted.
	require.Eventually(t, func() bool {
		info, err := b.client.tokens.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 15*time.Second, 50*time.Millisecond, "tokens outlived their lifetime")
	require.Eventually(t, func() bool {
		info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
		return err == nil && len(info.State.Subjects) == 0
	}, 15*time.Second, 50*time.Millisecond, "finished task messages stayed")

	var stored strings.Builder
	err = scanFrom(ctx, b.client, []string{wire.SubjectRoot + ".>"}, 0, false, func(m jetstream.Msg) (bool, error) {
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
	require.Contains(t, stored.String(), `"status":"solved"`, "the outcome without its token stays for the audit")

	// Not only gone from the stream: gone from the store's files, where a
	// deleted message's bytes would stay until compaction.
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

// blockBytes is the size of the message blocks under dir.
func blockBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	require.NoError(t, filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".blk") {
			return err
		}
		if info, err := d.Info(); err == nil {
			n += info.Size()
		}
		return nil
	}))
	return n
}

// A pending task's page URL is in the store's files from the moment the
// task is accepted on a plaintext store, and never readable there on an
// encrypted one, while the stream serves it to workers all the same.
func TestEncryptedStoreNeverHoldsATaskInTheClear(t *testing.T) {
	t.Parallel()
	for _, encrypted := range []bool{false, true} {
		b := setupPlaintext(t, Topology{})
		if encrypted {
			b = setup(t, Topology{})
		}
		ctx := testContext(t)
		task := turnstileTask("pending1")
		task.Params["pageurl"] = "https://shop.example/cart/pending-marker"
		_, err := b.client.Submit(ctx, task)
		require.NoError(t, err)
		info, err := b.client.TaskOf(ctx, "pending1")
		require.NoError(t, err)
		require.Equal(t, TaskQueued, info.Status, "encrypted=%v", encrypted)
		dir := b.ns.JetStreamConfig().StoreDir
		if !encrypted {
			require.Eventually(t, func() bool { return len(storeHolds(t, dir, []string{"pending-marker"})) == 1 }, 15*time.Second, 20*time.Millisecond,
				"a plaintext store's files hold the pending task's page URL: the scan works")
			continue
		}
		require.Eventually(t, func() bool { return blockBytes(t, dir) > int64(len(task.Params["pageurl"])) }, 15*time.Second, 20*time.Millisecond,
			"the task never reached the store's files")
		require.Empty(t, storeHolds(t, dir, []string{"pending-marker", "shop.example", "pending1"}))
	}
}

// A worker that stops before the tokens it stored expire leaves none of
// them on disk, and they still leave with their lifetime.
func TestTokensOfAStoppedWorkerNeverReachTheDisk(t *testing.T) {
	t.Parallel()
	b := setupPlaintext(t, Topology{}) // so that the scan can see the store's other contents
	ctx := testContext(t)
	w := b.startWorker(t, WorkerConfig{Solver: countingSolver(new(atomic.Int32)), Threads: 4,
		TokenLifetimes: map[string]time.Duration{"turnstile": 5 * time.Second}})
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
	require.Len(t, tokens, len(tasks))
	w.stop()
	require.NoError(t, <-w.done)
	w.done <- nil
	dir := b.ns.JetStreamConfig().StoreDir
	require.NotEmpty(t, storeHolds(t, dir, []string{"left0"}), "the scan reads the store")
	require.Empty(t, storeHolds(t, dir, tokens))
	info, err := b.client.tokens.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(len(tasks)), info.State.Msgs, "the stopped worker's tokens live on in memory")
	require.Eventually(t, func() bool {
		info, err := b.client.tokens.Info(ctx)
		return err == nil && info.State.Msgs == 0
	}, 15*time.Second, 50*time.Millisecond, "tokens outlived their lifetime")
	out, err := b.client.Wait(ctx, "left0")
	require.ErrorIs(t, err, ErrTokenExpired)
	require.Empty(t, out.Solution)
}

// With NoErase a finished task's message is deleted, not erased: gone from
// the stream, while on a plaintext store its page URL stays in the store's
// files, as documented.
func TestNoEraseDeletesWithoutErasing(t *testing.T) {
	t.Parallel()
	b := setupPlaintext(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: countingSolver(new(atomic.Int32)), NoErase: true})
	task := turnstileTask("plain1")
	task.Params["pageurl"] = "https://shop.example/qa/plain-delete-marker"
	_, err := b.client.Solve(ctx, task)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := b.client.s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAllTasks))
		return err == nil && len(info.State.Subjects) == 0
	}, 15*time.Second, 20*time.Millisecond, "the finished task message stayed in the stream")
	require.Equal(t, []string{"plain-delete-marker"}, storeHolds(t, b.ns.JetStreamConfig().StoreDir, []string{"plain-delete-marker"}),
		"deleted without erasing: the bytes stay until compaction")
}

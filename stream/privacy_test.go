package stream

import (
	"fmt"
	"log/slog"
	"net/http/httptest"
	"strings"
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

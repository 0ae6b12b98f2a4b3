package pool

import (
	"context"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// bucket starts an embedded server with the pool's bucket, as an admin
// creates it, and returns a function that opens a JetStream handle on a
// connection of its own (one per worker).
func bucket(t *testing.T) func() jetstream.JetStream {
	t.Helper()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	open := func() jetstream.JetStream {
		nc, err := nats.Connect("", nats.InProcessServer(ns))
		require.NoError(t, err)
		t.Cleanup(nc.Close)
		js, err := jetstream.New(nc)
		require.NoError(t, err)
		return js
	}
	_, err = topology.EnsureTimings(t.Context(), open(), topology.Spec{})
	require.NoError(t, err)
	return open
}

func openLedger(t *testing.T, js jetstream.JetStream) *Ledger {
	t.Helper()
	l, err := OpenLedger(t.Context(), js, "")
	require.NoError(t, err)
	return l
}

// Workers on connections of their own adding to one scope at once never
// pass its budget together, and every add that was accepted is counted:
// a lost update would let the pool pay past its cap.
func TestLedgerBudgetHoldsAcrossWorkers(t *testing.T) {
	t.Parallel()
	open := bucket(t)
	day := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	const cost, budget = 0.002, 0.05 // 25 adds fit
	var accepted atomic.Int32
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range 8 {
		l := openLedger(t, open())
		wg.Go(func() {
			<-start
			for range 10 {
				ok, _, err := l.AddWithin(context.Background(), "provider-a", day, cost, budget)
				require.NoError(t, err)
				if ok {
					accepted.Add(1)
				}
			}
		})
	}
	close(start)
	wg.Wait()
	require.Equal(t, int32(25), accepted.Load(), "the budget is used in full, and no further")
	spent, err := openLedger(t, open()).Spent(t.Context(), "provider-a", day)
	require.NoError(t, err)
	require.InDelta(t, 0.05, spent, 1e-9, "every accepted add counted once")
}

// A spend that reaches the budget exactly is within it; one more millionth
// is not. The ledger rounds to the nearest millionth, as stats' spend does.
func TestLedgerBudgetBoundary(t *testing.T) {
	t.Parallel()
	l := openLedger(t, bucket(t)())
	ctx := t.Context()
	day := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	for i := range 3 {
		ok, spent, err := l.AddWithin(ctx, "p", day, 0.01, 0.03)
		require.NoError(t, err)
		require.True(t, ok, "add %d of 3 reaches the budget at most", i+1)
		require.InDelta(t, 0.01*float64(i), spent, 1e-9)
	}
	ok, spent, err := l.AddWithin(ctx, "p", day, 0.000001, 0.03)
	require.NoError(t, err)
	require.False(t, ok, "a millionth past the budget")
	require.InDelta(t, 0.03, spent, 1e-9)
	// A refund is taken even past the budget (lowered meanwhile).
	ok, _, err = l.AddWithin(ctx, "p", day, -0.01, 0.01)
	require.NoError(t, err)
	require.True(t, ok, "a refund is never refused")
	spent, err = l.Spent(ctx, "p", day)
	require.NoError(t, err)
	require.InDelta(t, 0.02, spent, 1e-9)

	for range 3 {
		require.NoError(t, l.Add(ctx, "rounded", day, 0.0000027)) // 2.7 millionths: 3
	}
	spent, err = l.Spent(ctx, "rounded", day)
	require.NoError(t, err)
	require.InDelta(t, 0.000009, spent, 1e-12, "each cost rounded to the nearest millionth")
}

// A day's spend is that day's: the next day (UTC) starts from nothing, as
// does another scope.
func TestLedgerKeepsEachDayApart(t *testing.T) {
	t.Parallel()
	l := openLedger(t, bucket(t)())
	ctx := t.Context()
	day := time.Date(2026, 12, 7, 23, 0, 0, 0, time.UTC)
	require.NoError(t, l.Add(ctx, "p", day, 1.5))
	for _, c := range []struct {
		scope string
		at    time.Time
		want  float64
	}{
		{"p", day.Add(30 * time.Minute), 1.5},
		{"p", day.In(time.FixedZone("UTC+10", 10*3600)), 1.5}, // the 8th there: the day is UTC's
		{"p", day.Add(2 * time.Hour), 0},
		{"p", day.Add(-24 * time.Hour), 0},
		{"q", day, 0},
	} {
		spent, err := l.Spent(ctx, c.scope, c.at)
		require.NoError(t, err)
		require.Equal(t, c.want, spent, "%s on %s", c.scope, c.at)
	}
}

// Huge figures (a cost a broken provider reported, or a sum an earlier
// version wrote past the ledger's bound) never wrap the day's sum below
// zero, which would void every cap of the day.
func TestLedgerHugeFiguresNeverWrap(t *testing.T) {
	t.Parallel()
	open := bucket(t)
	l := openLedger(t, open())
	ctx := t.Context()
	day := time.Date(2026, 12, 7, 10, 0, 0, 0, time.UTC)
	require.NoError(t, l.Add(ctx, "p", day, 1e13))
	require.NoError(t, l.Add(ctx, "p", day, 1e13))
	spent, err := l.Spent(ctx, "p", day)
	require.NoError(t, err)
	require.Greater(t, spent, 1e11, "held at its bound, not wrapped")
	ok, _, err := l.AddWithin(ctx, "p", day, 1, 100)
	require.NoError(t, err)
	require.False(t, ok, "the day is over any budget")

	// A sum stored past the bound (9.2e18 millionths).
	kv, err := open().KeyValue(ctx, topology.TimingsBucket)
	require.NoError(t, err)
	_, err = kv.Put(ctx, ledgerKey("q", day), []byte(strconv.FormatInt(9_200_000_000_000_000_000, 10)))
	require.NoError(t, err)
	require.NoError(t, l.Add(ctx, "q", day, 1e13))
	spent, err = l.Spent(ctx, "q", day)
	require.NoError(t, err)
	require.Greater(t, spent, 1e11, "held at its bound, not wrapped")
}

// Releasing a claim ends its contest too: the provider may give the id
// again for a new captcha, whose holder must not refuse its answer for a
// contest of the old one.
func TestReleaseEndsTheContest(t *testing.T) {
	t.Parallel()
	open := bucket(t)
	ctx := t.Context()
	claims := func() *Claims {
		c, err := OpenClaims(ctx, open(), "")
		require.NoError(t, err)
		return c
	}
	a, b := claims(), claims()
	ok, err := a.Claim(ctx, "prov", "id-1")
	require.NoError(t, err)
	require.True(t, ok)
	sent := time.Now()
	ok, err = b.Claim(ctx, "prov", "id-1")
	require.NoError(t, err)
	require.False(t, ok, "held by a")
	require.NoError(t, b.Contest(ctx, "prov", "id-1", sent.Add(-time.Hour)))
	contested, err := a.Contested(ctx, "prov", "id-1")
	require.NoError(t, err)
	require.True(t, contested)

	require.NoError(t, a.Release(ctx, "prov", "id-1"))
	ok, err = b.Claim(ctx, "prov", "id-1")
	require.NoError(t, err)
	require.True(t, ok, "released: the id may be claimed again")
	contested, err = b.Contested(ctx, "prov", "id-1")
	require.NoError(t, err)
	require.False(t, contested, "the old contest ended with the release")
}

// Workers merging one kind at once, each many times: every merge stored
// counts (one that lost to the others too often fails, as it may), and one
// that overwrote another's (no compare-and-set) would lose its answers.
func TestTimingsMergesFromManyWorkersAllCount(t *testing.T) {
	t.Parallel()
	open := bucket(t)
	var wg sync.WaitGroup
	var stored atomic.Int32
	start := make(chan struct{})
	for range 8 {
		s, err := OpenTimings(t.Context(), open(), "")
		require.NoError(t, err)
		wg.Go(func() {
			<-start
			for range 10 {
				_, err := s.MergeTimings(context.Background(), map[string]solver.Learned{solver.KindTurnstile: {Median: 4 * time.Second, Sigma: 0.3, N: 1, At: time.Now()}})
				if err == nil {
					stored.Add(1)
				} else {
					require.ErrorContains(t, err, "still updated by others")
				}
			}
		})
	}
	close(start)
	wg.Wait()
	s, err := OpenTimings(t.Context(), open(), "")
	require.NoError(t, err)
	held, err := s.Load(t.Context())
	require.NoError(t, err)
	require.Positive(t, stored.Load())
	require.Equal(t, int(stored.Load()), held[solver.KindTurnstile].N, "every merge stored counted once")
}

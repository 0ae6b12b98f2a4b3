package stream

import (
	"context"
	"log/slog"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/internal/logbuf"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// bareServer is an embedded JetStream server on which nobody has created
// the stream yet.
func bareServer(t *testing.T) *server.Server {
	t.Helper()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), LazySync: true})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	return ns
}

func bareJetStream(t *testing.T, ns *server.Server) jetstream.JetStream {
	t.Helper()
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	return js
}

// requireOneAnchor requires the stream to hold exactly one anchor, that
// never expires, and returns its sequence.
func requireOneAnchor(ctx context.Context, t *testing.T, s jetstream.Stream) uint64 {
	t.Helper()
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.SubjectAnchor))
	require.NoError(t, err)
	require.Equal(t, map[string]uint64{wire.SubjectAnchor: 1}, info.State.Subjects)
	m, err := s.GetLastMsgForSubject(ctx, wire.SubjectAnchor)
	require.NoError(t, err)
	require.Equal(t, "never", m.Header.Get("Nats-TTL"))
	return m.Sequence
}

func TestAnchorStoredOnceByRacingCreators(t *testing.T) {
	t.Parallel()
	ns := bareServer(t)
	ctx := testContext(t)

	// Two servers (or `captchaq init` runs) start at once on a fresh server.
	errs := make(chan error, 2)
	for range 2 {
		js := bareJetStream(t, ns)
		go func() {
			_, err := EnsureTopology(ctx, js.Conn(), Topology{}, true)
			errs <- err
		}()
	}
	require.NoError(t, <-errs)
	require.NoError(t, <-errs)
	js := bareJetStream(t, ns)
	s, err := js.Stream(ctx, DefaultStream)
	require.NoError(t, err)
	seq := requireOneAnchor(ctx, t, s)
	require.Equal(t, uint64(1), seq, "the anchor is the stream's first message")

	// A later update finds it and stores no second one.
	_, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	require.Equal(t, seq, requireOneAnchor(ctx, t, s))

	// An operator's purge removes it; the next update puts it back, at the
	// tail.
	_, err = js.Publish(ctx, wire.SubjectRoot+".events.purged", []byte(`{}`))
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx))
	_, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	require.Equal(t, uint64(3), requireOneAnchor(ctx, t, s))
}

func TestAnchorStoredByProducersAndWorkersThatCreateTheStream(t *testing.T) {
	t.Parallel()
	for name, create := range map[string]func(ctx context.Context, js jetstream.JetStream) error{
		"producer": func(ctx context.Context, js jetstream.JetStream) error {
			_, _, err := topology.EnsureStreams(ctx, js, Topology{}.spec(), false) // the stream alone
			return err
		},
		"worker": func(ctx context.Context, js jetstream.JetStream) error {
			_, err := EnsureTopology(ctx, js.Conn(), Topology{}, false) // the stream and the consumers
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ctx := testContext(t)
			js := bareJetStream(t, bareServer(t))
			require.NoError(t, create(ctx, js))
			s, err := js.Stream(ctx, DefaultStream)
			require.NoError(t, err)
			require.Equal(t, uint64(1), requireOneAnchor(ctx, t, s))

			// Without update, an existing stream is left as it is.
			require.NoError(t, create(ctx, js))
			requireOneAnchor(ctx, t, s)
		})
	}
}

// TestAnchorKeepsTheFirstSequenceBelowTheQueue: once the stream's first task
// is deleted (as a worker does when its outcome is stored), the stream's
// first sequence is still the anchor's, not the next queued task's, so
// nats-server takes no scan of every queued subject on the next delivery.
func TestAnchorKeepsTheFirstSequenceBelowTheQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	anchor := requireOneAnchor(ctx, t, b.client.s)
	var seqs []uint64
	for _, id := range []string{"first", "second"} {
		r, err := b.client.Submit(ctx, turnstileTask(id))
		require.NoError(t, err)
		seqs = append(seqs, r.Seq)
	}
	require.Less(t, anchor, seqs[0])
	require.NoError(t, b.client.s.DeleteMsg(ctx, seqs[0]))

	info, err := b.client.s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, anchor, info.State.FirstSeq)
	require.Less(t, info.State.FirstSeq, seqs[1], "below the next queued task")
	require.Equal(t, uint64(2), info.State.Msgs, "the anchor and the second task")
}

// TestWorkerWarnsWithoutAnchor: a worker that finds the stream without its
// anchor says so, and how to put it back.
func TestWorkerWarnsWithoutAnchor(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, b.top.withDefaults().Stream)
	require.NoError(t, err)
	require.NoError(t, s.Purge(ctx, jetstream.WithPurgeSubject(wire.SubjectAnchor)))
	var logs logbuf.Buffer
	_, err = NewWorker(ctx, b.connect(t), WorkerConfig{Solver: tokenSolver(), Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	require.NoError(t, err)
	require.Contains(t, logs.String(), "no anchor")
	require.Contains(t, logs.String(), "captchaq init")
}

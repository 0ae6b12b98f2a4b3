package main

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// A token carried over the store's reopening keeps its sequence in the
// token stream, the number its outcome names (wire.HeaderTokenSeq), even
// when tokens before it were removed (read and erased, or expired): the
// new stream would number them from 1, and a reader, finding another
// subject at its outcome's number, would report the token lost.
func TestRestoredTokensKeepTheirSequences(t *testing.T) {
	t.Parallel()
	ns, err := broker.Start(broker.Config{StoreDir: t.TempDir(), Logger: slog.New(slog.DiscardHandler)})
	require.NoError(t, err)
	t.Cleanup(func() { ns.Shutdown(); ns.WaitForShutdown() })
	nc, err := connectInProcess(ns, "restore-test", "", "")
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	top := stream.Topology{}
	require.NoError(t, ensureTopology(ctx, nc, top, -1, false))
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	s, err := js.Stream(ctx, top.TokenStream())
	require.NoError(t, err)

	// Four solved tokens; the first and the third are gone before the
	// reopening, so the ones kept sit at 2 and 4.
	ids := []string{"t-1", "t-2", "t-3", "t-4"}
	for i, id := range ids {
		m := nats.NewMsg(wire.TokenSubject(id, 1))
		m.Data = fmt.Appendf(nil, `{"id":%q,"solution":"tok-%d"}`, id, i)
		m.Header.Set(jetstream.MsgTTLHeader, "300s")
		ack, err := js.PublishMsg(ctx, m)
		require.NoError(t, err)
		require.Equal(t, uint64(i+1), ack.Sequence)
	}
	require.NoError(t, s.DeleteMsg(ctx, 1))
	require.NoError(t, s.DeleteMsg(ctx, 3))

	held := &heldTokens{js: js, name: top.TokenStream(), log: slog.New(slog.DiscardHandler)}
	held.save()
	// A reopening empties the memory-backed stream: the server creates it
	// again (the Reopened callback), then restores.
	require.NoError(t, js.DeleteStream(ctx, top.TokenStream()))
	require.NoError(t, ensureTopology(ctx, nc, top, -1, false))
	require.NoError(t, held.restore())

	s, err = js.Stream(ctx, top.TokenStream())
	require.NoError(t, err)
	for _, seq := range []uint64{2, 4} {
		m, err := s.GetMsg(ctx, seq)
		require.NoError(t, err, "the token at %d, as its outcome names it", seq)
		require.Equal(t, wire.TokenSubject(ids[seq-1], 1), m.Subject, "the token at %d", seq)
		require.Equal(t, fmt.Sprintf(`{"id":%q,"solution":"tok-%d"}`, ids[seq-1], seq-1), string(m.Data))
	}
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, uint64(2), info.State.Msgs, "the two tokens kept, nothing else: %+v", info.State)
	require.Equal(t, uint64(4), info.State.LastSeq, "a worker's next token comes after them")
}

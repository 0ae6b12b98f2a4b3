package stream

import (
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// TestUpdateLeavesAnUnchangedStreamAlone: EnsureTopology with update sends
// the stream's configuration only when it differs, as the server's stream
// advisories show: of an identical update and a changed one, one update.
func TestUpdateLeavesAnUnchangedStreamAlone(t *testing.T) {
	t.Parallel()
	ns := bareServer(t)
	ctx := testContext(t)
	nc, err := nats.Connect("", nats.InProcessServer(ns))
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	_, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)

	adv, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	_, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	s, err := EnsureTopology(ctx, js.Conn(), Topology{MaxBytes: 1 << 30}, true)
	require.NoError(t, err)
	require.Equal(t, int64(1<<30), s.CachedInfo().Config.MaxBytes)
	// The server sends its advisories in order: once the marker stream's
	// shows, every earlier one has.
	_, err = js.CreateStream(ctx, jetstream.StreamConfig{Name: "MARKER", Subjects: []string{"marker"}})
	require.NoError(t, err)
	updates := 0
	for {
		m, err := adv.NextMsg(10 * time.Second)
		require.NoError(t, err)
		if strings.HasSuffix(m.Subject, ".UPDATED."+DefaultStream) {
			updates++
		}
		if strings.HasSuffix(m.Subject, ".CREATED.MARKER") {
			break
		}
	}
	require.Equal(t, 1, updates, "the identical update was sent too")
}

// TestUpdateUndoesChangesMadeByHand: a stream setting changed by hand,
// one streamConfig does not mention included, is set back by an update;
// the server's own metadata does not count as a change.
func TestUpdateUndoesChangesMadeByHand(t *testing.T) {
	t.Parallel()
	ns := bareServer(t)
	ctx := testContext(t)
	js := bareJetStream(t, ns)
	s, err := EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	want := topology.StreamConfig(withPayload(Topology{}, js.Conn().MaxPayload()))
	require.True(t, topology.SameStreamConfig(s.CachedInfo().Config, want), "as the server reports it: %+v", s.CachedInfo().Config)

	byHand := s.CachedInfo().Config
	byHand.MaxMsgsPerSubject = 1
	byHand.MaxMsgSize = 1024
	_, err = js.UpdateStream(ctx, byHand)
	require.NoError(t, err)
	s, err = EnsureTopology(ctx, js.Conn(), Topology{}, true)
	require.NoError(t, err)
	info, err := s.Info(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(-1), info.Config.MaxMsgsPerSubject)
	require.Equal(t, int32(wire.MaxTaskMessage(js.Conn().MaxPayload())), info.Config.MaxMsgSize)
	require.True(t, topology.SameStreamConfig(info.Config, want))
}

// withPayload is t's spec for a server whose max_payload is maxPayload.
func withPayload(t Topology, maxPayload int64) topology.Spec {
	s := t.spec()
	s.MaxPayload = maxPayload
	return s
}

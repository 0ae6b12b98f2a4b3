package stream

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"
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
	_, err = EnsureTopology(ctx, js, Topology{}, true)
	require.NoError(t, err)

	adv, err := nc.SubscribeSync("$JS.EVENT.ADVISORY.STREAM.>")
	require.NoError(t, err)
	require.NoError(t, nc.Flush())
	_, err = EnsureTopology(ctx, js, Topology{}, true)
	require.NoError(t, err)
	s, err := EnsureTopology(ctx, js, Topology{MaxBytes: 1 << 30}, true)
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

// TestSameStreamConfigComparesEverySetting: every setting streamConfig
// makes takes part in the comparison (a setting added to streamConfig but
// not to sameStreamConfig would never reach an existing stream).
func TestSameStreamConfigComparesEverySetting(t *testing.T) {
	t.Parallel()
	want := Topology{}.withDefaults().streamConfig()
	require.True(t, sameStreamConfig(want, want))
	v := reflect.ValueOf(want)
	for i := range v.NumField() {
		if v.Field(i).IsZero() {
			continue
		}
		have := want
		reflect.ValueOf(&have).Elem().Field(i).SetZero()
		require.False(t, sameStreamConfig(have, want), "a stream without %s counts as the same", v.Type().Field(i).Name)
	}
}

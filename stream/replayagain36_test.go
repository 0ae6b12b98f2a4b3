package stream

import (
	"strconv"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A producer who reads an operator's replay (direct gets are a producer's
// right) and publishes the same message again once the stream's duplicate
// window has passed does not run the victim's task again: the copy ends
// INVALID_ENVELOPE, and the replay is the only solve paid after the
// letter.
func TestReplayPublishedAgainPastTheWindowIsNotRunAgain(t *testing.T) {
	t.Parallel()
	b := newReplayBed(t)
	a, ctx := b.attack, b.ctx
	b.startWorker(t, 2, nil)
	// The window passes in a moment here; the stream's default is 2 min.
	info, err := a.astream.Info(ctx)
	require.NoError(t, err)
	cfg := info.Config
	cfg.Duplicates = 200 * time.Millisecond
	_, err = a.admin.UpdateStream(ctx, cfg)
	require.NoError(t, err)

	const id = "hr-again"
	_, hash, _ := b.submitOwned(t, id, false)
	_, err = a.victim.Wait(ctx, id)
	require.ErrorIs(t, err, ErrNotSolved)
	d, err := a.victim.DeadLetterOf(ctx, id)
	require.NoError(t, err)
	b.broken.Store(false)
	_, err = b.operator.Replay(ctx, id)
	require.NoError(t, err)
	_, err = a.victim.Wait(ctx, id)
	require.NoError(t, err, "the replay is solved")
	require.Equal(t, int32(1), b.paid.Load(), "the replay paid once")

	// The letter (task, cancel hash), read by direct get, makes the
	// replay's message again.
	dead := strconv.FormatUint(d.Seq, 10)
	again := nats.NewMsg(d.Subject)
	again.Data = d.Task
	again.Header.Set(wire.HeaderMsgID, wire.ReplayMsgID(id, dead))
	again.Header.Set(wire.HeaderReplayedBy, dead)
	again.Header.Set(wire.HeaderCancelHash, hash)
	var seq uint64
	require.Eventually(t, func() bool {
		ack, err := a.attacker.PublishMsg(ctx, again)
		require.NoError(t, err)
		seq = ack.Sequence
		return !ack.Duplicate
	}, 10*time.Second, 50*time.Millisecond, "the stream takes the same message once its duplicate window passed")
	o := waitOutcome(ctx, t, a.astream, id, seq)
	require.Equal(t, StatusDead, o.Status, "the copy: %+v", o)
	require.Equal(t, CodeInvalidEnvelope, o.Error, "not a replay: %s", o.Detail)
	require.Equal(t, int32(1), b.paid.Load(), "nothing paid for the copy")
}

package taskstore_test

import (
	"encoding/json"
	"strconv"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

const replayTask = `{"method":"turnstile","params":{"sitekey":"0x4AAAAAAABkMYinukE8nzY","pageurl":"https://shop.example/"}}`

// replayCopy publishes a replay-shaped task message of id naming dead
// letter deadSeq (its message id the replay's, so the stream takes each
// deadSeq once) and returns its sequence and headers.
func replayCopy(t *testing.T, s *taskstore.JetStream, id string, deadSeq uint64) (uint64, nats.Header) {
	t.Helper()
	ds := strconv.FormatUint(deadSeq, 10)
	msg := nats.NewMsg(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id))
	msg.Header.Set(wire.HeaderReplayedBy, ds)
	msg.Data = []byte(replayTask)
	ack, err := s.JS.PublishMsg(t.Context(), msg, jetstream.WithMsgID(wire.ReplayMsgID(id, ds)))
	require.NoError(t, err)
	require.False(t, ack.Duplicate)
	return ack.Sequence, msg.Header
}

func parseReplayTask() (wire.Task, error) { return wire.ParseTask([]byte(replayTask)) }

// A flood of replay-shaped copies of one id, each naming a dead letter
// the id does not have (a different one each, as the stream takes each
// replay message id once), costs the worker's store a few reads of the
// id's letters and replay records in all, not reads of its own each; each
// is still judged forged.
func TestReplayFloodOfOneIDCostsFewReads(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	const id, n = "flood1", 200
	type cp struct {
		gen uint64
		h   nats.Header
	}
	var copies []cp
	for i := range n {
		gen, h := replayCopy(t, s, id, uint64(i+1))
		copies = append(copies, cp{gen, h})
	}
	before := s.NC.Stats().OutMsgs
	for _, c := range copies {
		err := s.VerifyReplayOf(ctx, id, c.gen, c.h, parseReplayTask)
		require.ErrorIs(t, err, taskstore.ErrForged)
	}
	reads := s.NC.Stats().OutMsgs - before
	t.Logf("%d replay-shaped copies of one id judged forged with %d requests", n, reads)
	require.LessOrEqual(t, reads, uint64(10), "requests to judge %d copies of one id", n)
}

// A genuine replay is verified whatever the store judged of the id
// before: a forged copy judged first (the id had no letter then), then a
// dead letter, its replay, the admin's record of it and the letter's
// purge; and a replay whose letter is still there.
func TestGenuineReplayAfterForgedCopiesOfItsID(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	const id = "genuine1"
	gen, h := replayCopy(t, s, id, 1)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, h, parseReplayTask), taskstore.ErrForged)

	letter, err := s.JS.Publish(ctx, wire.DeadSubject(id), []byte(replayTask))
	require.NoError(t, err)
	gen, h = replayCopy(t, s, id, letter.Sequence)
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, h, parseReplayTask), "the letter is there")

	rec, err := json.Marshal(wire.Replay{DeadSeq: letter.Sequence, TaskSeq: gen})
	require.NoError(t, err)
	_, err = s.JS.Publish(ctx, wire.ReplaySubject(id), rec)
	require.NoError(t, err)
	require.NoError(t, s.Stream.DeleteMsg(ctx, letter.Sequence))
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, h, parseReplayTask), "the letter purged, the record names the copy")

	other, h2 := replayCopy(t, s, id, letter.Sequence-1)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, other, h2, parseReplayTask), taskstore.ErrForged)
	// A replay names a letter before it.
	later, h3 := replayCopy(t, s, id, gen+100)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, later, h3, parseReplayTask), taskstore.ErrForged)
}

// The store's facts of an id read while it had no letter and no replay
// record (two forged copies judged) do not condemn a genuine replay whose
// letter was stored, replayed, recorded and purged since.
func TestGenuineReplayAfterTheIDsFactsWereRead(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	const id = "genuine2"
	for ds := range uint64(2) {
		gen, h := replayCopy(t, s, id, ds+1)
		require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, h, parseReplayTask), taskstore.ErrForged)
	}
	letter, err := s.JS.Publish(ctx, wire.DeadSubject(id), []byte(replayTask))
	require.NoError(t, err)
	gen, h := replayCopy(t, s, id, letter.Sequence)
	rec, err := json.Marshal(wire.Replay{DeadSeq: letter.Sequence, TaskSeq: gen})
	require.NoError(t, err)
	_, err = s.JS.Publish(ctx, wire.ReplaySubject(id), rec)
	require.NoError(t, err)
	require.NoError(t, s.Stream.DeleteMsg(ctx, letter.Sequence))
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, h, parseReplayTask))
}

// A flood over many ids, one replay-shaped copy each, costs no more reads
// a copy than before the store kept facts of ids: two (the letter named,
// the id's replay records).
func TestReplayFloodOverManyIDsCostsTwoReadsACopy(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	const n = 50
	type cp struct {
		id  string
		gen uint64
		h   nats.Header
	}
	var copies []cp
	for i := range n {
		id := "many" + strconv.Itoa(i)
		gen, h := replayCopy(t, s, id, 1)
		copies = append(copies, cp{id, gen, h})
	}
	before := s.NC.Stats().OutMsgs
	for _, c := range copies {
		require.ErrorIs(t, s.VerifyReplayOf(ctx, c.id, c.gen, c.h, parseReplayTask), taskstore.ErrForged)
	}
	reads := s.NC.Stats().OutMsgs - before
	t.Logf("%d replay-shaped copies over as many ids judged forged with %d requests", n, reads)
	require.LessOrEqual(t, reads, uint64(2*n))
}

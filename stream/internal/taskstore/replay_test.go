package taskstore_test

import (
	"encoding/json"
	"maps"
	"strconv"
	"testing"
	"time"

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

// storedAt is when the stream stored message seq.
func storedAt(t *testing.T, s *taskstore.JetStream, seq uint64) time.Time {
	t.Helper()
	m, err := s.Stream.GetMsg(t.Context(), seq)
	require.NoError(t, err)
	return m.Time
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
		at  time.Time
		h   nats.Header
	}
	var copies []cp
	for i := range n {
		gen, h := replayCopy(t, s, id, uint64(i+1))
		copies = append(copies, cp{gen, storedAt(t, s, gen), h})
	}
	before := s.NC.Stats().OutMsgs
	for _, c := range copies {
		err := s.VerifyReplayOf(ctx, id, c.gen, c.at, c.h, parseReplayTask)
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
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), taskstore.ErrForged)

	letter, err := s.JS.Publish(ctx, wire.DeadSubject(id), []byte(replayTask))
	require.NoError(t, err)
	gen, h = replayCopy(t, s, id, letter.Sequence)
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), "the letter is there")

	rec, err := json.Marshal(wire.Replay{DeadSeq: letter.Sequence, TaskSeq: gen})
	require.NoError(t, err)
	_, err = s.JS.Publish(ctx, wire.ReplaySubject(id), rec)
	require.NoError(t, err)
	require.NoError(t, s.Stream.DeleteMsg(ctx, letter.Sequence))
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), "the letter purged, the record names the copy")

	other, h2 := replayCopy(t, s, id, letter.Sequence-1)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, other, storedAt(t, s, other), h2, parseReplayTask), taskstore.ErrForged)
	// A replay names a letter before it.
	later, h3 := replayCopy(t, s, id, gen+100)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, later, storedAt(t, s, later), h3, parseReplayTask), taskstore.ErrForged)
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
		require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), taskstore.ErrForged)
	}
	gen, h := replayedAndPurged(t, s, id)
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask))
}

// replayedAndPurged stores a dead letter of id, its replay (returned as
// replayCopy does), the admin's record of it, and purges the letter.
func replayedAndPurged(t *testing.T, s *taskstore.JetStream, id string) (uint64, nats.Header) {
	t.Helper()
	letter, err := s.JS.Publish(t.Context(), wire.DeadSubject(id), []byte(replayTask))
	require.NoError(t, err)
	gen, h := replayCopy(t, s, id, letter.Sequence)
	rec, err := json.Marshal(wire.Replay{DeadSeq: letter.Sequence, TaskSeq: gen})
	require.NoError(t, err)
	_, err = s.JS.Publish(t.Context(), wire.ReplaySubject(id), rec)
	require.NoError(t, err)
	require.NoError(t, s.Stream.DeleteMsg(t.Context(), letter.Sequence))
	return gen, h
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
		at  time.Time
		h   nats.Header
	}
	var copies []cp
	for i := range n {
		id := "many" + strconv.Itoa(i)
		gen, h := replayCopy(t, s, id, 1)
		copies = append(copies, cp{id, gen, storedAt(t, s, gen), h})
	}
	before := s.NC.Stats().OutMsgs
	for _, c := range copies {
		require.ErrorIs(t, s.VerifyReplayOf(ctx, c.id, c.gen, c.at, c.h, parseReplayTask), taskstore.ErrForged)
	}
	reads := s.NC.Stats().OutMsgs - before
	t.Logf("%d replay-shaped copies over as many ids judged forged with %d requests", n, reads)
	require.LessOrEqual(t, reads, uint64(2*n))
}

// A store's facts of an id are those of the stream it read them from: once
// the stream is deleted and created again (as a restore of a backup
// starts), its sequences start again below what the facts covered, and a
// genuine replay there (its letter still stored, or purged with the
// admin's record written) is verified, while a copy that an old replay
// record happens to name is not taken for a replay.
func TestReplayFactsDoNotOutliveTheirStream(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	const id = "recreated1"
	// Two forged copies, the second past the stream's first 30 messages:
	// the store's facts of id cover the stream up to there, and hold a
	// replay record of the old stream naming (5, 31).
	rec, err := json.Marshal(wire.Replay{DeadSeq: 5, TaskSeq: 31})
	require.NoError(t, err)
	for range 28 {
		_, err := s.JS.Publish(ctx, wire.ReplaySubject(id), rec)
		require.NoError(t, err)
	}
	for ds := range uint64(2) {
		gen, h := replayCopy(t, s, id, ds+1)
		require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), taskstore.ErrForged)
	}
	info, err := s.Stream.Info(ctx)
	require.NoError(t, err)
	old := info.State.LastSeq
	require.NoError(t, s.JS.DeleteStream(ctx, info.Config.Name))
	_, err = s.JS.CreateStream(ctx, info.Config)
	require.NoError(t, err)

	// The new stream: a letter, its replay (the letter still there).
	letter, err := s.JS.Publish(ctx, wire.DeadSubject(id), []byte(replayTask))
	require.NoError(t, err)
	gen, h := replayCopy(t, s, id, letter.Sequence)
	require.Less(t, gen, old, "the new stream's sequences are below what the facts covered")
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), "the letter is there")

	// Another letter, replayed, recorded and purged.
	gen2, h2 := replayedAndPurged(t, s, id)
	require.NoError(t, s.VerifyReplayOf(ctx, id, gen2, storedAt(t, s, gen2), h2, parseReplayTask), "the letter purged, the record names the copy")

	// A copy at the sequence the old stream's record names, naming a
	// letter the new stream never had.
	for {
		pad, err := s.JS.Publish(ctx, wire.ReplaySubject(id)+"x", nil)
		require.NoError(t, err)
		if pad.Sequence == 30 {
			break
		}
	}
	forged, fh := replayCopy(t, s, id, 5)
	require.Equal(t, uint64(31), forged)
	require.ErrorIs(t, s.VerifyReplayOf(ctx, id, forged, storedAt(t, s, forged), fh, parseReplayTask), taskstore.ErrForged, "the old stream's record names it")
}

// A dead letter is replayed once: a copy of its replay that a producer
// publishes again once the stream's duplicate window has passed (the same
// task and cancel hash, read from the letter, which producers may read)
// is not a replay of it, whether the store judges it on reads of its own
// or on what it knows of the id, and is not run (and paid) again.
func TestReplayedLetterIsNotReplayedAgainByACopy(t *testing.T) {
	t.Parallel()
	ctx, s := setup(t)
	for _, id := range []string{"again1", "again2"} {
		if id == "again2" {
			// The store knows the id's letters and records (two forged
			// copies judged): the copy is judged on what it knows.
			for ds := range uint64(2) {
				gen, h := replayCopy(t, s, id, 1000+ds)
				require.ErrorIs(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), taskstore.ErrForged)
			}
		}
		letter, err := s.JS.Publish(ctx, wire.DeadSubject(id), []byte(replayTask))
		require.NoError(t, err)
		gen, h := replayCopy(t, s, id, letter.Sequence)
		require.NoError(t, s.VerifyReplayOf(ctx, id, gen, storedAt(t, s, gen), h, parseReplayTask), "the replay")
		rec, err := json.Marshal(wire.Replay{DeadSeq: letter.Sequence, TaskSeq: gen})
		require.NoError(t, err)
		_, err = s.JS.Publish(ctx, wire.ReplaySubject(id), rec)
		require.NoError(t, err)

		// The same message again, as the stream takes it once its
		// duplicate window has passed.
		again := nats.NewMsg(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id))
		again.Header = maps.Clone(h)
		again.Data = []byte(replayTask)
		ack, err := s.JS.PublishMsg(ctx, again, jetstream.WithMsgID("past-the-window-"+id))
		require.NoError(t, err)
		require.ErrorIs(t, s.VerifyReplayOf(ctx, id, ack.Sequence, storedAt(t, s, ack.Sequence), h, parseReplayTask), taskstore.ErrForged,
			"%s: the letter was replayed as message %d", id, gen)
	}
}

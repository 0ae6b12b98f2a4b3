package taskstore

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// ErrForged marks an envelope check that failed on what the stream holds,
// as opposed to a read that failed.
var ErrForged = errors.New("not a submission of its id")

// IgnoreForged is err unless it says a message is forged (a verdict, not a
// failed read).
func IgnoreForged(err error) error {
	if errors.Is(err, ErrForged) {
		return nil
	}
	return err
}

// VerifyReplay checks a task message that carries a replay's message id
// (stream's Client.Replay): anyone who may submit tasks could put one on a task of
// their own, so it must name a dead letter of the same id with the same
// task (method and parameters) and the letter's cancel hash
// (wire.ReplayCancelHashOK: no producer takes over or drops the owner's
// cancel), or
// a replay record of the admin's must name it. An error wrapping ErrForged
// says it does not; any other error is a failed read.
func VerifyReplay(ctx context.Context, s jetstream.Stream, id string, gen uint64, h nats.Header, t wire.Task) error {
	letter := func(ctx context.Context, subject string, seq uint64) ([]byte, nats.Header, bool, error) {
		// The id's first letter at or after seq.
		m, err := s.GetMsg(ctx, seq, jetstream.WithGetMsgSubject(subject))
		switch {
		case errors.Is(err, jetstream.ErrMsgNotFound):
			return nil, nil, false, nil
		case err != nil:
			return nil, nil, false, err
		}
		return m.Data, m.Header, m.Sequence == seq, nil
	}
	return verifyReplay(ctx, s, letter, id, gen, h, func() (wire.Task, error) { return t, nil })
}

// VerifyReplayOf is VerifyReplay for a task message whose body is not
// parsed yet: the dead letter its headers name is read first, and the body
// is parsed (parse) only to be compared with a letter that is there. A
// replay-shaped copy that names no letter of its id, which anyone who may
// submit can publish as large as the broker takes, is judged forged
// without its body being parsed, and without the broker sending the
// message it names (or any letter) when that is not a letter of the id.
//
// The first copy of an id costs two reads (the letter it names, the id's
// replay records); from the second on, what the store learns of the id's
// letters and records is kept (replayFacts), so that a flood of
// replay-shaped copies of one id, each naming another letter (the stream
// takes each replay message id once), costs a few reads in all rather than
// two of its own each.
//
// The facts are a stream's: sequences start again in a stream deleted and
// created again (a restore starts so), where the facts' letters and
// records would condemn a genuine replay or pass a copy that an old record
// names. A copy stored after the facts last looked at the stream (stored)
// has the store look again (one read), and facts of a stream created since
// are forgotten; a copy stored before was stored in the stream they are of.
// Within a second of that look the store looks again only for a copy whose
// sequence a later copy of the same stream could not have (at or below the
// last one the look saw): an ongoing flood of copies of one id, each stored
// after the last look, so costs a stream info request a second rather than
// one a copy (the flood's innocent task waited 27.7 s in CI, against its
// bound of 19.7 s), and a stream created again since, whose sequences start
// again, is still seen at its first copy; one that outgrew the old last
// sequence within the second, at its next look.
func (s *JetStream) VerifyReplayOf(ctx context.Context, id string, gen uint64, stored time.Time, h nats.Header, parse func() (wire.Task, error)) error {
	deadSeq, err := strconv.ParseUint(h.Get(wire.HeaderReplayedBy), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: header %s %q is not a sequence", ErrForged, wire.HeaderReplayedBy, text.Cut(h.Get(wire.HeaderReplayedBy), 30))
	}
	if deadSeq >= gen {
		// A replay is published after the letter it copies was stored.
		return fmt.Errorf("%w: message %d it claims to replay comes after it", ErrForged, deadSeq)
	}
	f := s.replays.of(id)
	f.mu.Lock()
	defer f.mu.Unlock()
	if !f.seen {
		// One copy of an id (a genuine replay, or one of a flood over
		// many ids) is judged on its own reads: learning the id's
		// letters and records would cost it more.
		f.seen = true
		return s.verifyOnce(ctx, id, gen, h, parse)
	}
	if stored.After(f.lookedAt) && (gen <= f.lookedSeq || stored.Sub(f.lookedAt) > recreatedLook) {
		if _, err := f.look(ctx, s.Stream); err != nil {
			return err
		}
	}
	if deadSeq > f.lettersTo {
		if err := f.readLetters(ctx, s.Stream, id); err != nil {
			return err
		}
	}
	if f.letters[deadSeq] {
		r, err := jscall.NewDirectReader(s.NC, s.Domain, s.Stream.CachedInfo().Config.Name)
		if err != nil {
			return err
		}
		defer r.Close()
		m, err := r.At(ctx, wire.DeadSubject(id), deadSeq)
		if err != nil {
			return err
		}
		if m != nil {
			if err := matchLetter(m.Data(), m.Headers(), deadSeq, h, parse); err != nil {
				return err
			}
			if !f.recordsFresh || f.recordsTo < gen {
				if err := f.readRecords(ctx, s.Stream, id); err != nil {
					return err
				}
			}
			for r := range f.records {
				if err := replayedElsewhere(r[0], r[1], deadSeq, gen); err != nil {
					return err
				}
			}
			return nil
		}
		// Purged since: its replay record, if any, was written before.
		delete(f.letters, deadSeq)
		f.recordsFresh = false
	}
	if !f.recordsFresh {
		if err := f.readRecords(ctx, s.Stream, id); err != nil {
			return err
		}
	}
	if !f.records[[2]uint64{deadSeq, gen}] {
		return fmt.Errorf("%w: message %d is not a dead letter of %s, and no replay record names this task", ErrForged, deadSeq, id)
	}
	return nil
}

// verifyOnce is VerifyReplayOf on reads of its own: the letter named,
// and the id's replay records if it is not there.
func (s *JetStream) verifyOnce(ctx context.Context, id string, gen uint64, h nats.Header, parse func() (wire.Task, error)) error {
	r, err := jscall.NewDirectReader(s.NC, s.Domain, s.Stream.CachedInfo().Config.Name)
	if err != nil {
		return err
	}
	defer r.Close()
	letter := func(ctx context.Context, subject string, seq uint64) ([]byte, nats.Header, bool, error) {
		m, err := r.At(ctx, subject, seq)
		if err != nil || m == nil {
			return nil, nil, false, err
		}
		return m.Data(), m.Headers(), true, nil
	}
	return verifyReplay(ctx, s.Stream, letter, id, gen, h, parse)
}

// replayFacts is what a store knows of one id's dead letters and replay
// records, read once for every replay-shaped copy of the id it judges.
// Letters and records are only ever added to the stream under an id
// (purged, a letter is found gone when read), and a replay's letter comes
// before its task message, which comes before the admin's record naming
// it, which comes before the letter's purge. So for a copy stored at gen:
// every letter it may name (before gen) was read at or below lettersTo
// once lettersTo >= gen; a letter found there is read again before it is
// trusted; and a letter not found there, or found gone, was purged after
// its record was written, which records, read after (recordsFresh), hold.
type replayFacts struct {
	mu sync.Mutex
	// seen says a copy of the id was judged (verifyOnce).
	seen      bool
	letters   map[uint64]bool // the sequences of the id's letters, up to lettersTo
	lettersTo uint64
	// records are the id's replay records up to recordsTo, as (dead
	// letter, task message) sequences; recordsFresh says they were read
	// after the letters last were.
	records      map[[2]uint64]bool
	recordsTo    uint64
	recordsFresh bool
	// created is when the stream the facts are of was created, and
	// lookedAt the store time of its last message when the store last
	// looked (look).
	created, lookedAt time.Time
	// lookedSeq is the stream's last sequence at that look.
	lookedSeq uint64
}

// recreatedLook is how long after a look a copy stored later, with a
// sequence past the one that look saw, is judged without another look.
const recreatedLook = time.Second

// look reads the stream's state and returns its last sequence; the facts
// of a stream other than the one they were read from (created at another
// time) are forgotten first.
func (f *replayFacts) look(ctx context.Context, s jetstream.Stream) (uint64, error) {
	info, err := s.Info(ctx)
	if err != nil {
		return 0, err
	}
	if !info.Created.Equal(f.created) {
		f.letters, f.lettersTo = map[uint64]bool{}, 0
		f.records, f.recordsTo, f.recordsFresh = map[[2]uint64]bool{}, 0, false
		f.created = info.Created
	}
	f.lookedAt, f.lookedSeq = info.State.LastTime, info.State.LastSeq
	return info.State.LastSeq, nil
}

// readLetters reads the id's letters stored after lettersTo, up to the
// stream's last sequence (read first).
func (f *replayFacts) readLetters(ctx context.Context, s jetstream.Stream, id string) error {
	last, err := f.look(ctx, s)
	if err != nil {
		return err
	}
	err = jscall.Walk(ctx, s, wire.DeadSubject(id), f.lettersTo+1, last, func(m *jetstream.RawStreamMsg) { f.letters[m.Sequence] = true })
	if err != nil {
		return err
	}
	f.lettersTo, f.recordsFresh = last, false
	return nil
}

// readRecords reads the id's replay records stored after recordsTo, up to
// the stream's last sequence (read first).
func (f *replayFacts) readRecords(ctx context.Context, s jetstream.Stream, id string) error {
	last, err := f.look(ctx, s)
	if err != nil {
		return err
	}
	err = jscall.Walk(ctx, s, wire.ReplaySubject(id), f.recordsTo+1, last, func(m *jetstream.RawStreamMsg) {
		var r wire.Replay
		if json.Unmarshal(m.Data, &r) == nil {
			f.records[[2]uint64{r.DeadSeq, r.TaskSeq}] = true
		}
	})
	if err != nil {
		return err
	}
	f.recordsTo, f.recordsFresh = last, true
	return nil
}

// replayCache holds a store's replayFacts by id. Its zero value is ready.
type replayCache struct {
	mu  sync.Mutex
	ids map[string]*replayFacts
}

// maxReplayIDs bounds the ids a store keeps facts of: past it, it forgets
// them all and reads again what it needs.
const maxReplayIDs = 4096

func (c *replayCache) of(id string) *replayFacts {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.ids == nil || len(c.ids) >= maxReplayIDs {
		c.ids = map[string]*replayFacts{}
	}
	f := c.ids[id]
	if f == nil {
		f = &replayFacts{letters: map[uint64]bool{}, records: map[[2]uint64]bool{}}
		c.ids[id] = f
	}
	return f
}

// matchLetter checks a replay-shaped copy (headers h, body parse) against
// dead letter deadSeq it names (data, dh): the same task and cancel hash.
func matchLetter(data []byte, dh nats.Header, deadSeq uint64, h nats.Header, parse func() (wire.Task, error)) error {
	dt, derr := wire.ParseTask(data)
	if derr != nil {
		return fmt.Errorf("%w: dead letter %d it claims to replay holds no task", ErrForged, deadSeq)
	}
	t, perr := parse()
	if perr != nil || dt.Method != t.Method || !maps.Equal(dt.Params, t.Params) {
		return fmt.Errorf("%w: the task differs from dead letter %d it claims to replay", ErrForged, deadSeq)
	}
	if !wire.ReplayCancelHashOK(dh.Get(wire.HeaderCancelHash), h.Get(wire.HeaderCancelHash)) {
		return fmt.Errorf("%w: header %s differs from dead letter %d's, which it claims to replay", ErrForged, wire.HeaderCancelHash, deadSeq)
	}
	return nil
}

// replayedElsewhere says why a copy stored at gen naming dead letter
// deadSeq is not its replay, when a replay record (recDead, recTask) names
// another task message as that letter's replay: a letter is replayed once
// (Client.replay), and a producer may publish a copy of its replay again
// once the stream's duplicate window has passed. A record of a replay
// started (no task message yet) names none.
func replayedElsewhere(recDead, recTask, deadSeq, gen uint64) error {
	if recDead != deadSeq || recTask == 0 || recTask == gen {
		return nil
	}
	return fmt.Errorf("%w: dead letter %d was replayed as task message %d", ErrForged, deadSeq, recTask)
}

// verifyReplay is VerifyReplay with the letter at a sequence read by
// letter (found: a message on the subject at exactly that sequence), and
// the task message's body parsed by parse only when there is one.
func verifyReplay(ctx context.Context, s jetstream.Stream,
	letter func(ctx context.Context, subject string, seq uint64) (data []byte, h nats.Header, found bool, err error),
	id string, gen uint64, h nats.Header, parse func() (wire.Task, error)) error {
	deadSeq, err := strconv.ParseUint(h.Get(wire.HeaderReplayedBy), 10, 64)
	if err != nil {
		return fmt.Errorf("%w: header %s %q is not a sequence", ErrForged, wire.HeaderReplayedBy, text.Cut(h.Get(wire.HeaderReplayedBy), 30))
	}
	data, dh, found, err := letter(ctx, wire.DeadSubject(id), deadSeq)
	switch {
	case err != nil:
		return err
	case found:
		if err := matchLetter(data, dh, deadSeq, h, parse); err != nil {
			return err
		}
	}
	// The letter is gone (purged after the replay): the admin's replay
	// record still names this task message. It is there: no record names
	// another message as its replay.
	named, elsewhere := false, error(nil)
	err = jscall.Walk(ctx, s, wire.ReplaySubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		var r wire.Replay
		if json.Unmarshal(m.Data, &r) == nil {
			named = named || r.DeadSeq == deadSeq && r.TaskSeq == gen
			elsewhere = cmp.Or(elsewhere, replayedElsewhere(r.DeadSeq, r.TaskSeq, deadSeq, gen))
		}
	})
	switch {
	case err != nil:
		return err
	case elsewhere != nil:
		return elsewhere
	case found:
		return nil
	}
	if !named {
		return fmt.Errorf("%w: message %d is not a dead letter of %s, and no replay record names this task", ErrForged, deadSeq, id)
	}
	return nil
}

package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strconv"

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
func (s *JetStream) VerifyReplayOf(ctx context.Context, id string, gen uint64, h nats.Header, parse func() (wire.Task, error)) error {
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
	// The letter is gone (purged after the replay): the admin's replay
	// record still names this task message.
	found = false
	err = jscall.Walk(ctx, s, wire.ReplaySubject(id), 0, 0, func(m *jetstream.RawStreamMsg) {
		var r wire.Replay
		if json.Unmarshal(m.Data, &r) == nil && r.DeadSeq == deadSeq && r.TaskSeq == gen {
			found = true
		}
	})
	if err != nil {
		return err
	}
	if !found {
		return fmt.Errorf("%w: message %d is not a dead letter of %s, and no replay record names this task", ErrForged, deadSeq, id)
	}
	return nil
}

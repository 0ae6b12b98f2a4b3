package taskstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// StoredToken is a token as the token stream holds it: the solved outcome
// with its solution, the token's own sequence in the token stream, and the
// sequence of the attempt event it names (wire.HeaderAttemptSeq; 0 when it
// names none, which no worker of this pool writes).
type StoredToken struct {
	Out     wire.Outcome
	Seq     uint64
	Attempt uint64
}

// ReadToken reads the token of generation gen of task id from the token
// stream tokens: the solved outcome with its solution, and whether it is
// there (it is not once expired, or after a broker restart).
func ReadToken(ctx context.Context, tokens jetstream.Stream, id string, gen uint64) (wire.Outcome, bool, error) {
	tok, found, err := ReadStoredToken(ctx, tokens, id, gen)
	return tok.Out, found, err
}

// ReadStoredToken reads the last message on the token subject of
// generation gen of task id (ReadToken), with its sequence and the attempt
// it names.
func ReadStoredToken(ctx context.Context, tokens jetstream.Stream, id string, gen uint64) (StoredToken, bool, error) {
	m, err := tokens.GetLastMsgForSubject(ctx, wire.TokenSubject(id, gen))
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return StoredToken{}, false, nil
	}
	if err != nil {
		return StoredToken{}, false, fmt.Errorf("read the token of task %s: %w", id, err)
	}
	tok := StoredToken{Seq: m.Sequence}
	if err := json.Unmarshal(m.Data, &tok.Out); err != nil {
		return StoredToken{}, false, fmt.Errorf("token of task %s: %w", id, err)
	}
	tok.Attempt, _ = strconv.ParseUint(m.Header.Get(wire.HeaderAttemptSeq), 10, 64)
	return tok, true, nil
}

// ReadTokenAt reads the token of generation gen of task id at sequence seq
// of the token stream tokens, the one its outcome names
// (wire.HeaderTokenSeq): the solved outcome with its solution, and whether
// it is there (it is not once expired, or after a broker restart, or when
// the message at seq is not on the generation's token subject).
func ReadTokenAt(ctx context.Context, tokens jetstream.Stream, id string, gen, seq uint64) (wire.Outcome, bool, error) {
	m, err := tokens.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wire.Outcome{}, false, nil
	}
	if err != nil {
		return wire.Outcome{}, false, fmt.Errorf("read the token of task %s: %w", id, err)
	}
	if m.Subject != wire.TokenSubject(id, gen) {
		return wire.Outcome{}, false, nil
	}
	var out wire.Outcome
	if err := json.Unmarshal(m.Data, &out); err != nil {
		return wire.Outcome{}, false, fmt.Errorf("token of task %s: %w", id, err)
	}
	return out, true, nil
}

// AttemptAt reads the record at sequence seq of the CAPTCHA stream s and
// reports whether it is an attempt event of generation gen of task id, with
// the event when it is.
func AttemptAt(ctx context.Context, s jetstream.Stream, id string, gen, seq uint64) (wire.Event, bool, error) {
	m, err := s.GetMsg(ctx, seq)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return wire.Event{}, false, nil
	}
	if err != nil {
		return wire.Event{}, false, fmt.Errorf("read the records of task %s: %w", id, err)
	}
	if m.Subject != wire.EventSubject(id) {
		return wire.Event{}, false, nil
	}
	ev, ok := wire.ParseEvent(m.Data)
	if !ok || ev.Kind != wire.EventAttempt || ev.Gen != gen {
		return wire.Event{}, false, nil
	}
	return ev, true, nil
}

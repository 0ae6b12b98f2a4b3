package taskstore

import (
	"context"
	"encoding/json"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
)

// DeadLetters reads the dead letters on deadSubj (all of them, or one
// task's), oldest first, each with the replay the records on replaySubj
// say it had (Replayed: the one that queued the task when there is one,
// else the first that started).
func (r *Reader) DeadLetters(ctx context.Context, deadSubj, replaySubj string) ([]wire.DeadLetter, error) {
	var letters []wire.DeadLetter
	replays := map[uint64]*wire.Replay{}
	err := r.ScanFrom(ctx, []string{deadSubj, replaySubj}, 0, false, func(m Record) (bool, error) {
		if m.Subject == wire.DeadSubject(wire.IDFromSubject(m.Subject)) {
			letters = append(letters, wire.ParseDeadLetter(m.Subject, m.Header, m.Data, m.Seq, m.Stored))
			return false, nil
		}
		var rp wire.Replay
		if json.Unmarshal(m.Data, &rp) == nil && (replays[rp.DeadSeq] == nil || rp.TaskSeq != 0) {
			replays[rp.DeadSeq] = &rp
		}
		return false, nil
	})
	if err != nil {
		return nil, err
	}
	for i := range letters {
		letters[i].Replayed = replays[letters[i].Seq]
	}
	return letters, nil
}

// StoredOutcome is an outcome as the CAPTCHA stream keeps it: without the
// token of a solve (that is in the token stream, at TokenSeq), with the
// generation it ends and when it was stored.
type StoredOutcome struct {
	wire.Outcome
	// Gen is the generation (task message sequence) the outcome ends; 0
	// when its message names none.
	Gen uint64
	// TokenSeq is the token's sequence in the token stream the outcome
	// names (wire.HeaderTokenSeq); 0 when none.
	TokenSeq uint64
	// Stored is when the stream stored the outcome: when the task ended.
	Stored time.Time
}

// Outcomes calls fn with every outcome stored since since (zero: all the
// stream keeps), oldest first, leaving out what does not read as one;
// with follow it then waits for new ones until ctx ends. fn's error ends
// the read and is returned as it is.
func (r *Reader) Outcomes(ctx context.Context, since time.Time, follow bool, fn func(StoredOutcome) error) error {
	return r.Scan(ctx, ScanOpts{Subjects: []string{wire.SubjectResults + ".>"}, StartTime: since, Follow: follow}, func(m Record) (bool, error) {
		var o wire.Outcome
		if json.Unmarshal(m.Data, &o) != nil || o.ID == "" {
			return false, nil
		}
		return false, fn(StoredOutcome{Outcome: o, Gen: GenOf(m.Header), TokenSeq: TokenSeqOf(m.Header), Stored: m.Stored})
	})
}

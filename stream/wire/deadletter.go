package wire

import (
	"encoding/json"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/retry"
)

// DeadLetter is a task that could not be solved, with why and how far it got,
// as DeadLetters lists it and `captchaq dead` prints it. It is part of the
// wire contract: fields may be added; these keep their names and meaning.
type DeadLetter struct {
	// Seq is the dead letter's stream sequence; it names the letter in replay.
	Seq uint64 `json:"seq"`
	// ID is the task's id.
	ID string `json:"id"`
	// Method is the task's method; empty when Task is not a valid task.
	Method string `json:"method,omitempty"`
	// Host is the host of the task's pageurl (never the full URL):
	// "invalid-url" when it does not parse, empty when there is none.
	Host string `json:"host,omitempty"`
	// Reason is why the task is dead.
	Reason retry.Reason `json:"reason"`
	// Error is the code of the task's last failure, as in Outcome.Error.
	Error string `json:"error,omitempty"`
	// Detail says more about why, in words (Outcome.Detail).
	Detail string `json:"detail,omitempty"`
	// Attempts is how many solving attempts were spent on the task's
	// generation that died.
	Attempts int `json:"attempts"`
	// Subject is the task subject the task was delivered on
	// (captcha.tasks.<lane>.<priority>.<id>).
	Subject string `json:"subject"`
	// Gen is the stream sequence of the task message that died: which
	// submission or replay of the id this letter is about.
	Gen uint64 `json:"gen"`
	// FirstFailure is when the generation first failed (for a task dead
	// without an attempt, when it was judged). Zero only when the letter's
	// headers lack it.
	FirstFailure time.Time `json:"first_failure,omitzero"`
	// LastFailure is when the generation last failed; zero like
	// FirstFailure.
	LastFailure time.Time `json:"last_failure,omitzero"`
	// DeadAt is when the letter was stored.
	DeadAt time.Time `json:"dead_at"`
	// Task is the task message as it was submitted (JSON), or, when that was
	// not JSON, a JSON string holding its first 200 bytes.
	Task json.RawMessage `json:"task"`
	// CancelHash is the task message's Captchaq-Cancel-Hash, the hash of
	// the secret its owner cancels it with (never the secret); empty when
	// it had none. A replay of the letter carries it, so the owner, and
	// only the owner, can cancel the replayed task.
	CancelHash string `json:"cancel_hash,omitempty"`
	// BodyOmitted is the size in bytes of a task message too large to be
	// dead-lettered whole: the letter then holds no task (Task is "") and
	// cannot be replayed. Zero for a whole letter.
	BodyOmitted int `json:"body_omitted,omitempty"`
	// Replayed says when the letter was replayed; nil if it was not.
	Replayed *Replay `json:"replayed,omitempty"`
}

// Replay records that a dead letter went back onto the queue, as stored on
// captcha.replays.<id>.
type Replay struct {
	// DeadSeq is the stream sequence of the dead letter replayed
	// (DeadLetter.Seq).
	DeadSeq uint64 `json:"dead_seq"`
	// TaskSeq is the stream sequence of the new task message: the new
	// generation's Receipt.Seq. Zero in the record written before the task
	// was queued: a replay started, not known to have queued.
	TaskSeq uint64 `json:"task_seq"`
	// At is when the letter was replayed.
	At time.Time `json:"at"`
	// By is the name of the client that replayed it (stream.ClientConfig.Name);
	// empty when it had none.
	By string `json:"by,omitempty"`
}

// ParseDeadLetter reads the dead letter stored on subject at sequence seq,
// at time at, with headers h and body data. What its headers lack stays
// zero; a body that is not JSON is kept as a JSON string of its first 200
// bytes.
func ParseDeadLetter(subject string, h map[string][]string, data []byte, seq uint64, at time.Time) DeadLetter {
	d := DeadLetter{Seq: seq, ID: IDFromSubject(subject), Reason: retry.Reason(header(h, HeaderReason)), Error: header(h, HeaderError),
		Detail: header(h, HeaderDetail), Subject: header(h, HeaderSubject), CancelHash: header(h, HeaderCancelHash), DeadAt: at,
		Task: json.RawMessage(data)}
	d.Attempts, _ = strconv.Atoi(header(h, HeaderAttempts))
	d.BodyOmitted, _ = strconv.Atoi(header(h, HeaderBodyOmitted))
	d.Gen, _ = strconv.ParseUint(header(h, HeaderGen), 10, 64)
	d.FirstFailure, _ = time.Parse(time.RFC3339Nano, header(h, HeaderFirstFail))
	d.LastFailure, _ = time.Parse(time.RFC3339Nano, header(h, HeaderLastFail))
	if t, err := ParseTask(data); err == nil {
		d.Method, d.Host = t.Method, PageHost(t.Params)
	}
	if !json.Valid(data) {
		d.Task, _ = json.Marshal(text.Cut(string(data), 200))
	}
	return d
}

// ReplayMsgID is the message id of a replay of dead letter deadSeq of task
// id.
func ReplayMsgID(id, deadSeq string) string { return id + ".replay." + deadSeq }

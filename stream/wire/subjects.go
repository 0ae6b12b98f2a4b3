package wire

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
)

// Subjects. They are part of the wire contract (docs/wire-contract.md):
//
//	captcha.tasks.<lane>.<priority>.<id>  a task, Nats-Msg-Id = <id>; lane fast|slow, priority high|normal
//	captcha.later.<lane>.<priority>.<id>  the waiting room: a task that is not due yet (use_at, not_before)
//	captcha.events.<id>                   the task's life: attempts, retries, hand-backs, the verdict
//	captcha.results.<id>                  the outcome (no token): for a solved task, the record of the solve
//	captcha.dead.<id>                     a dead letter: the original task plus headers
//	captcha.replays.<id>                  a record that a dead letter was replayed
//	captcha.cancels.<id>                  an admin's cancel of a generation (or an owner's, relayed by a worker)
//	captcha.cancels.<id>.<gen>            an owner's cancel, valid with the secret the task message's hash names
//	captcha.workers.<name>                a worker's heartbeat
//	captcha.anchor                        one message that never expires, at the head; clients ignore it
//	captcha.tokens.<id>.<gen>             in CAPTCHA_TOKENS, in memory: a solved outcome with its token, until it expires
//	captcha.stored.<the rest>             the headers of everything the CAPTCHA stream stores, republished
const (
	// SubjectRoot is the first token of every captchaq subject; the stream
	// holds the subjects under it that StreamSubjects lists.
	SubjectRoot = "captcha"
	// SubjectTasks is the root of the task subjects,
	// captcha.tasks.<lane>.<priority>.<id>.
	SubjectTasks = "captcha.tasks"
	// SubjectAllTasks matches every task subject.
	SubjectAllTasks = SubjectTasks + ".>"
	// SubjectLater is the root of the waiting room's subjects,
	// captcha.later.<lane>.<priority>.<id>: a task that is not due yet
	// waits there, read by a consumer of its own (WaitingRoomConsumer), so
	// that it holds no slot of its lane's consumer (whose MaxAckPending is
	// the lane limit) while it waits. A worker moves a task there when it
	// is delivered before its time, and back onto its task subject when it
	// is due (MovedHeader); a producer may also submit a task there, which is
	// then a submission like one on its task subject.
	SubjectLater = "captcha.later"
	// SubjectAllLater matches every subject of the waiting room.
	SubjectAllLater = SubjectLater + ".>"
	// WaitingRoomConsumer is the durable name of the waiting room's
	// consumer, which workers alone read.
	WaitingRoomConsumer = "workers-later"
	// SubjectEvents is the root of the events of a task's life,
	// captcha.events.<id>.
	SubjectEvents = "captcha.events"
	// SubjectResults is the root of the outcomes, captcha.results.<id>.
	SubjectResults = "captcha.results"
	// SubjectDead is the root of the dead letters, captcha.dead.<id>.
	SubjectDead = "captcha.dead"
	// SubjectReplays is the root of the replay records, captcha.replays.<id>.
	SubjectReplays = "captcha.replays"
	// SubjectTokens is the root of the token stream's subjects,
	// captcha.tokens.<id>.<gen>.
	SubjectTokens = "captcha.tokens"
	// SubjectWorkers holds the workers' heartbeats: captcha.workers.<name>.
	SubjectWorkers = "captcha.workers"
	// SubjectCancels is the root of the cancel records:
	// captcha.cancels.<id>.<gen> from the task's owner, whose record must
	// carry the secret whose SHA-256 the task message names in its
	// Captchaq-Cancel-Hash header (so no other producer can cancel it), and
	// captcha.cancels.<id> from an admin (nats.conf lets only admins, and
	// workers relaying an owner's cancel, publish there).
	//
	// captcha.cancels.<id> is one of the task's own records (IDSubjects): a
	// delivery reads it with the task's state, at no cost, and every worker
	// write for the task expects the last sequence over them, so a cancel
	// stored after a delivery read the state makes its next write fail and the
	// delivery yields to it. An owner's subject has four tokens and is not one
	// of the task's records: anyone may publish there.
	SubjectCancels = "captcha.cancels"
	// SubjectStored is the root of the subjects the CAPTCHA stream
	// republishes every stored message's headers to, its subject after this
	// root (captcha.events.<id> → captcha.stored.events.<id>). Headers only:
	// a task or a dead letter holds a page URL in its body, and a reader
	// told that a record was stored reads it from the stream.
	SubjectStored = SubjectRoot + ".stored"
	// SubjectAnchor is the subject of the stream's anchor: one message that
	// never expires (Nats-TTL: never), stored by whoever creates the stream
	// and put back by an update of the topology. Clients ignore it.
	//
	// It keeps the stream's first sequence below every consumer's position.
	// When a consumer's next sequence is at or below the stream's first
	// sequence, nats-server's file store scans the subjects of every queued
	// task on each delivery (about 40 ms at a million queued, under the
	// store's lock); every task has its own subject and workers delete
	// finished tasks, so a backlog at the head of the stream would take that
	// path on nearly every delivery (bench/FINDINGS.md, "Scale: dispatch
	// latency").
	SubjectAnchor = SubjectRoot + ".anchor"
)

// StreamSubjects are the subjects the CAPTCHA stream stores: the four task
// subjects the workers' consumers read, the waiting room's four, the
// per-task records, and the anchor. Nothing else under captcha.> is stored, so a publish on a subject
// no consumer reads (captcha.tasks.fast.urgent.x, captcha.tasks.x, one token
// too many) is refused at once (no stream answers it) instead of being
// accepted and never handled; and nothing a producer may publish
// (captcha.tasks.<lane>.<priority>.<id>) matches IDSubjects.
func StreamSubjects() []string {
	var out []string
	for _, p := range Priorities {
		for _, l := range Lanes {
			out = append(out, TaskFilter(l, p))
		}
	}
	out = append(out, LaterFilters()...)
	return append(out, SubjectEvents+".*", SubjectResults+".*", SubjectDead+".*", SubjectReplays+".*", SubjectAnchor,
		SubjectCancels+".*.*", SubjectCancels+".*", SubjectWorkers+".*")
}

// TaskFilter is the subject filter of the workers' consumer of a lane and
// priority.
func TaskFilter(lane Lane, priority Priority) string {
	return fmt.Sprintf("%s.%s.%s.*", SubjectTasks, lane, priority)
}

// LaterFilters are the subjects of the waiting room, one per lane and
// priority, as the stream stores them.
func LaterFilters() []string {
	var out []string
	for _, p := range Priorities {
		for _, l := range Lanes {
			out = append(out, fmt.Sprintf("%s.%s.%s.*", SubjectLater, l, p))
		}
	}
	return out
}

// LaterSubject is the waiting room's subject of task id of a lane, at a
// priority.
func LaterSubject(lane Lane, priority Priority, id string) string {
	return fmt.Sprintf("%s.%s.%s.%s", SubjectLater, lane, priority, id)
}

// InWaitingRoom reports whether subject is one of the waiting room's.
func InWaitingRoom(subject string) bool { return strings.HasPrefix(subject, SubjectLater+".") }

// TaskSubjectOf is the task subject a task subject or a waiting room's
// subject stands for: captcha.later.<lane>.<priority>.<id> →
// captcha.tasks.<lane>.<priority>.<id>; any other subject as it is.
func TaskSubjectOf(subject string) string {
	if rest, ok := strings.CutPrefix(subject, SubjectLater+"."); ok {
		return SubjectTasks + "." + rest
	}
	return subject
}

// LaterSubjectOf is the waiting room's subject of a task subject.
func LaterSubjectOf(subject string) string {
	if rest, ok := strings.CutPrefix(subject, SubjectTasks+"."); ok {
		return SubjectLater + "." + rest
	}
	return subject
}

// IDSubjects matches every record of task id that workers and admins write
// (captcha.events, results, dead, replays and cancels.<id>) and nothing a
// producer may publish. Every worker write for a task expects the last
// sequence over it (compare-and-set), so whether an outcome exists is
// decided on state no producer can change, never by message-id
// deduplication, whose window a producer can occupy.
func IDSubjects(id string) string { return SubjectRoot + ".*." + id }

// TaskSubject is the subject of task id in a lane, at a priority.
func TaskSubject(lane Lane, priority Priority, id string) string {
	return fmt.Sprintf("%s.%s.%s.%s", SubjectTasks, lane, priority, id)
}

// TaskSubjectsFor matches the task messages of task id, in any lane and at
// any priority.
func TaskSubjectsFor(id string) string { return SubjectTasks + ".*.*." + id }

// EventSubject is where the events of task id are recorded.
func EventSubject(id string) string { return SubjectEvents + "." + id }

// ResultSubject is where the outcomes of task id are stored.
func ResultSubject(id string) string { return SubjectResults + "." + id }

// DeadSubject is where the dead letters of task id are stored.
func DeadSubject(id string) string { return SubjectDead + "." + id }

// ReplaySubject is where the replays of task id's dead letters are
// recorded.
func ReplaySubject(id string) string { return SubjectReplays + "." + id }

// TokenSubject is where the token of generation gen of task id is kept, in
// the token stream.
func TokenSubject(id string, gen uint64) string {
	return fmt.Sprintf("%s.%s.%d", SubjectTokens, id, gen)
}

// CancelSubject is where the owner of generation gen of task id publishes
// its cancel.
func CancelSubject(id string, gen uint64) string {
	return SubjectCancels + "." + id + "." + strconv.FormatUint(gen, 10)
}

// CancelRecordSubject is where an admin's cancel of task id is stored, and
// an owner's once a worker relayed it: among the task's records.
func CancelRecordSubject(id string) string { return SubjectCancels + "." + id }

// HeartbeatSubject is the subject of a worker's heartbeats: its name made
// one subject token, distinct names giving distinct tokens, so that no
// worker's heartbeat ever stands for another's. Letters, digits, '_' and
// '-' stay as they are; every other byte is written %XX (two hex digits),
// so "a.b" is a%2Eb, never a_b. A token that would be longer than
// MaxIDLength keeps its beginning and ends in '~' and 32 hex digits of the
// name's SHA-256, which no shorter token has ('~' is never kept).
func HeartbeatSubject(name string) string {
	var b strings.Builder
	for i := 0; i < len(name); i++ {
		if c := name[i]; keptInToken(c) {
			b.WriteByte(c)
		} else {
			fmt.Fprintf(&b, "%%%02X", c)
		}
	}
	tok := b.String()
	if len(tok) > MaxIDLength {
		sum := sha256.Sum256([]byte(name))
		tok = tok[:MaxIDLength-33] + "~" + hex.EncodeToString(sum[:16])
	}
	return SubjectWorkers + "." + tok
}

// keptInToken reports whether HeartbeatSubject keeps c as it is.
func keptInToken(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '_' || c == '-'
}

// StoredSubject is where the stream republishes what it stores on subject
// (a filter is fine).
func StoredSubject(subject string) string {
	return SubjectStored + strings.TrimPrefix(subject, SubjectRoot)
}

// IDFromSubject returns the last token of a subject: the task id on every
// per-task subject.
func IDFromSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

// LaneOfSubject returns the lane token of a task subject (or of a waiting
// room's subject).
func LaneOfSubject(subject string) Lane {
	rest, _ := strings.CutPrefix(TaskSubjectOf(subject), SubjectTasks+".")
	lane, _, _ := strings.Cut(rest, ".")
	return Lane(lane)
}

// TaskMessagesFor matches the task messages of task id: on its task
// subjects and in the waiting room. One filter names both, so a read is one
// request: the stream stores only the subjects StreamSubjects lists,
// and of those only the task lanes and the waiting room have five tokens
// (the per-task records have three or four), so no other message matches.
func TaskMessagesFor(id string) string { return SubjectRoot + ".*.*.*." + id }

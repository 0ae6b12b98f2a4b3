package stream

import (
	"fmt"
	"regexp"
	"strings"
)

// Subject prefixes. They are part of the wire contract (docs/wire-contract.md).
const (
	// SubjectRoot is the first token of every captchaq subject; the stream
	// holds the subjects under it that streamSubjects lists.
	SubjectRoot     = "captcha"
	subjectTasks    = "captcha.tasks"
	subjectEvents   = "captcha.events"
	subjectResults  = "captcha.results"
	subjectDead     = "captcha.dead"
	subjectReplays  = "captcha.replays"
	subjectTokens   = "captcha.tokens"
	subjectAllTasks = subjectTasks + ".>"
)

// Header names carried by captchaq's messages. They are part of the wire
// contract; each says which messages carry it.
const (
	// HeaderTaskID is the task's id, on task messages, outcomes and dead
	// letters.
	HeaderTaskID = "Captchaq-Task-Id"
	// HeaderGen is the stream sequence (decimal) of the task message an
	// outcome or dead letter belongs to: which submission of the id it ends.
	HeaderGen = "Captchaq-Gen"
	// HeaderAttempts is the number of attempts spent (decimal), on dead
	// letters.
	HeaderAttempts = "Captchaq-Attempts"
	// HeaderError is the code of the last failure, on dead letters (see
	// Outcome.Error).
	HeaderError = "Captchaq-Error"
	// HeaderReason is the retry.Reason, on dead letters.
	HeaderReason = "Captchaq-Reason"
	// HeaderDetail says more about a dead task in words (Outcome.Detail),
	// on dead letters that have it.
	HeaderDetail = "Captchaq-Detail"
	// HeaderBodyOmitted, on a dead letter, is the size in bytes of the task
	// message's body that the letter leaves out: the task was too large to
	// be dead-lettered whole.
	HeaderBodyOmitted = "Captchaq-Body-Omitted"
	// HeaderSubject is the task subject the task was delivered on, on dead
	// letters.
	HeaderSubject = "Captchaq-Subject"
	// HeaderFirstFail is when the task first failed (RFC 3339, UTC), on dead
	// letters.
	HeaderFirstFail = "Captchaq-First-Failure"
	// HeaderLastFail is when the task last failed (RFC 3339, UTC), on dead
	// letters.
	HeaderLastFail = "Captchaq-Last-Failure"
	// HeaderDeadSeq is the stream sequence (decimal) of the dead letter a
	// replay record is about, on captcha.replays.<id>.
	HeaderDeadSeq = "Captchaq-Dead-Seq"
	// HeaderClient is the producer's name (ClientConfig.Name), on task
	// messages whose producer has one, and on their dead letters.
	HeaderClient = "Captchaq-Client"
	// HeaderReplayedBy is the stream sequence (decimal) of the dead letter a
	// task message replays, on replayed task messages.
	HeaderReplayedBy = "Captchaq-Replay-Of"
)

const (
	headerMsgID    = "Nats-Msg-Id"
	headerNatsTTL  = "Nats-TTL"
	maxIDLength    = 64
	priorityHigh   = "high"
	priorityNormal = "normal"
)

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidateID reports whether id can name a task: 1 to 64 characters of
// A–Z, a–z, 0–9, '_' and '-' (it becomes a subject token).
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("id: empty")
	case len(id) > maxIDLength:
		return fmt.Errorf("id: %d characters, at most %d", len(id), maxIDLength)
	case !idPattern.MatchString(id):
		return fmt.Errorf("id %q: only letters, digits, '_' and '-' are allowed", id)
	}
	return nil
}

// streamSubjects are the subjects the CAPTCHA stream stores: the four task
// subjects the workers' consumers read, the per-task records, and the
// anchor. Nothing else under captcha.> is stored, so a publish on a subject
// no consumer reads (captcha.tasks.fast.urgent.x, captcha.tasks.x, one token
// too many) is refused at once (no stream answers it) instead of being
// accepted and never handled; and nothing a producer may publish
// (captcha.tasks.<lane>.<priority>.<id>) matches idSubjects.
func streamSubjects() []string {
	var out []string
	for _, wc := range workerConsumers() {
		out = append(out, taskFilter(wc.lane, wc.priority))
	}
	return append(out, subjectEvents+".*", subjectResults+".*", subjectDead+".*", subjectReplays+".*", SubjectAnchor,
		subjectCancels+".*.*", subjectCancels+".*", subjectWorkers+".*")
}

// taskFilter is the subject filter of the workers' consumer of a lane and
// priority.
func taskFilter(lane Lane, priority string) string {
	return fmt.Sprintf("%s.%s.%s.*", subjectTasks, lane, priority)
}

// idSubjects matches every record of task id that workers and admins write
// (captcha.events, results, dead and replays.<id>) and nothing a producer
// may publish. Every worker write for a task expects the last sequence over
// it (compare-and-set), so whether an outcome exists is decided on state no
// producer can change, never by message-id deduplication, whose window a
// producer can occupy.
func idSubjects(id string) string { return SubjectRoot + ".*." + id }

func taskSubject(lane Lane, priority, id string) string {
	return fmt.Sprintf("%s.%s.%s.%s", subjectTasks, lane, priority, id)
}

func taskSubjectsFor(id string) string { return subjectTasks + ".*.*." + id }
func eventSubject(id string) string    { return subjectEvents + "." + id }
func resultSubject(id string) string   { return subjectResults + "." + id }
func deadSubject(id string) string     { return subjectDead + "." + id }
func replaySubject(id string) string   { return subjectReplays + "." + id }

// tokenSubject is where the token of generation gen of task id is kept, in
// the token stream (Topology.TokenStream).
func tokenSubject(id string, gen uint64) string {
	return fmt.Sprintf("%s.%s.%d", subjectTokens, id, gen)
}

// idFromSubject returns the last token of a subject: the task id on every
// per-task subject.
func idFromSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

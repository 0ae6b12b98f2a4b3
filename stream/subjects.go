package stream

import (
	"fmt"
	"regexp"
	"strings"
)

// Subject prefixes. They are part of the wire contract (README, "Wire contract").
const (
	SubjectRoot     = "captcha"
	subjectTasks    = "captcha.tasks"
	subjectEvents   = "captcha.events"
	subjectResults  = "captcha.results"
	subjectDead     = "captcha.dead"
	subjectReplays  = "captcha.replays"
	subjectAllTasks = subjectTasks + ".>"
)

// Header names carried by captchaq's messages.
const (
	HeaderTaskID      = "Captchaq-Task-Id"
	HeaderGen         = "Captchaq-Gen" // stream sequence of the task message an outcome belongs to
	HeaderAttempts    = "Captchaq-Attempts"
	HeaderError       = "Captchaq-Error"
	HeaderReason      = "Captchaq-Reason"
	HeaderSubject     = "Captchaq-Subject"
	HeaderFirstFail   = "Captchaq-First-Failure"
	HeaderLastFail    = "Captchaq-Last-Failure"
	HeaderDeadSeq     = "Captchaq-Dead-Seq"
	HeaderClient      = "Captchaq-Client"
	HeaderReplayedBy  = "Captchaq-Replay-Of"
	headerMsgID       = "Nats-Msg-Id"
	headerNatsTTL     = "Nats-TTL"
	maxIDLength       = 64
	priorityHigh      = "high"
	priorityNormal    = "normal"
	invalidTaskIDStem = "invalid-"
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

func taskSubject(lane Lane, priority, id string) string {
	return fmt.Sprintf("%s.%s.%s.%s", subjectTasks, lane, priority, id)
}

func taskSubjectsFor(id string) string { return subjectTasks + ".*.*." + id }
func eventSubject(id string) string    { return subjectEvents + "." + id }
func resultSubject(id string) string   { return subjectResults + "." + id }
func deadSubject(id string) string     { return subjectDead + "." + id }
func replaySubject(id string) string   { return subjectReplays + "." + id }

// idFromSubject returns the last token of a subject: the task id on every
// per-task subject.
func idFromSubject(subject string) string {
	if i := strings.LastIndexByte(subject, '.'); i >= 0 {
		return subject[i+1:]
	}
	return subject
}

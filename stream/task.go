package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/solver"
)

// Task is one captcha to solve, as producers write it (one JSON object per
// task; JSON lines for the CLI).
type Task struct {
	// ID names the task; Submit generates one when it is empty. See ValidateID.
	ID string `json:"id,omitempty"`
	// Method is the solving service's method: userrecaptcha, turnstile,
	// geetest (v3; v4 with version=4), hcaptcha, cloudflare_challenge,
	// post, base64, bls (solver.Methods).
	Method string `json:"method"`
	// Params are the method's parameters, named as the service names them.
	// JSON numbers and booleans are accepted and kept as their text.
	Params Params `json:"params"`
	// Priority is PriorityHigh or PriorityNormal (empty means normal). High tasks start
	// before every queued normal task.
	Priority Priority `json:"priority,omitempty"`
	// Deadline is when the answer stops being useful. Submit sets the
	// producer's default (10 minutes) when it is zero.
	Deadline time.Time `json:"deadline,omitzero"`
}

// Priority orders tasks: every queued high-priority task starts before any
// normal one. It is part of the wire contract (the task's "priority" and a
// token of its subject).
type Priority string

// The priorities.
const (
	PriorityHigh   Priority = priorityHigh
	PriorityNormal Priority = priorityNormal
)

// Params are a task's method parameters by their API names. Their JSON form
// is an object whose values may be strings, numbers or booleans.
type Params map[string]string

// UnmarshalJSON accepts strings, numbers and booleans as values (min_score
// 0.3, invisible 1, enterprise true) and keeps each as its text.
func (p *Params) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return fmt.Errorf("params: want an object of strings, numbers or booleans: %w", err)
	}
	out := make(Params, len(raw))
	for k, v := range raw {
		v = bytes.TrimSpace(v)
		switch {
		case len(v) > 0 && v[0] == '"':
			var s string
			if err := json.Unmarshal(v, &s); err != nil {
				return fmt.Errorf("params.%s: %w", k, err)
			}
			out[k] = s
		case bytes.Equal(v, []byte("true")):
			out[k] = "1"
		case bytes.Equal(v, []byte("false")):
			out[k] = "0"
		default:
			if _, err := strconv.ParseFloat(string(v), 64); err != nil {
				return fmt.Errorf("params.%s: want a string, number or boolean, got %s", k, truncate(string(v), 40))
			}
			out[k] = string(v)
		}
	}
	*p = out
	return nil
}

// Lane groups methods by how long they take, so that a backlog of slow ones
// never starves fast ones. The lane is part of a task's subject.
type Lane string

const (
	// LaneSlow holds reCAPTCHA v2 (also invisible, enterprise), GeeTest (v3
	// and v4), hCaptcha and Cloudflare challenges: 15–60 s solves, whose
	// first poll CaptchaAI's examples wait 15–20 s for.
	LaneSlow Lane = "slow"
	// LaneFast holds Turnstile, reCAPTCHA v3, images, grids and BLS: 2–15 s
	// solves.
	LaneFast Lane = "fast"
)

// Lanes lists every lane, in the order workers look at them. Callers must
// not modify it.
var Lanes = []Lane{LaneFast, LaneSlow}

// LaneOf returns the lane a task of this method and parameters travels in:
// LaneSlow for reCAPTCHA v2, GeeTest, hCaptcha and cloudflare_challenge,
// LaneFast for everything else.
func LaneOf(method string, params Params) Lane {
	switch method {
	case "userrecaptcha":
		if params["version"] == "v3" {
			return LaneFast
		}
		return LaneSlow
	case "geetest", "hcaptcha", "cloudflare_challenge":
		return LaneSlow
	default:
		return LaneFast
	}
}

// ErrInvalidTask is matched (errors.Is) by every task validation error:
// every *TaskError from Validate, ParseTask and Submit.
var ErrInvalidTask = errors.New("invalid task")

// TaskError is a task that failed validation: which one, and what is wrong.
type TaskError struct {
	// Line is the 1-based line of the task in its input, or 0.
	Line int
	// ID is the task's id, when it has one.
	ID string
	// Err names the field and the problem.
	Err error
}

// Error reads like "line 3 (id a1): params.pageurl: required for method
// turnstile"; the line and the id appear only when known.
func (e *TaskError) Error() string {
	where := "task"
	if e.Line > 0 {
		where = fmt.Sprintf("line %d", e.Line)
	}
	if e.ID != "" {
		where += fmt.Sprintf(" (id %s)", e.ID)
	}
	return where + ": " + e.Err.Error()
}

// Unwrap returns ErrInvalidTask and Err, so errors.Is(err, ErrInvalidTask)
// holds for every TaskError and errors.As still reaches, say, a
// *solver.ValidationError.
func (e *TaskError) Unwrap() []error { return []error{ErrInvalidTask, e.Err} }

// Validate checks everything about a task that can be checked without the
// service: the id (when set), the method and its parameters (solver.Validate,
// the one place that knows them), the priority and the deadline.
func (t *Task) Validate(now time.Time) error {
	wrap := func(err error) error { return &TaskError{ID: t.ID, Err: err} }
	if t.ID != "" {
		if err := ValidateID(t.ID); err != nil {
			return wrap(err)
		}
	}
	if t.Method == "" {
		return wrap(errors.New("method: required"))
	}
	if err := solver.Validate(t.Method, t.Params); err != nil {
		return wrap(err)
	}
	switch t.Priority {
	case "", priorityNormal, priorityHigh:
	default:
		return wrap(fmt.Errorf("priority %q: want %q or %q", t.Priority, priorityHigh, priorityNormal))
	}
	if !t.Deadline.IsZero() && !t.Deadline.After(now) {
		return wrap(fmt.Errorf("deadline %s: already passed", t.Deadline.Format(time.RFC3339)))
	}
	return nil
}

func (t *Task) priority() string {
	if t.Priority == priorityHigh {
		return priorityHigh
	}
	return priorityNormal
}

// ParseTask decodes one task from JSON, rejecting unknown fields so that a
// typo ("prority") is an error rather than a silently ignored setting.
func ParseTask(b []byte) (Task, error) {
	var t Task
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		return Task{}, &TaskError{Err: fmt.Errorf("not a task object: %w", err)}
	}
	if dec.More() {
		return Task{}, &TaskError{ID: t.ID, Err: errors.New("trailing data after the task object")}
	}
	return t, nil
}

// Status is how a task ended.
type Status string

const (
	// StatusSolved means the task was solved: the outcome carries the
	// solution until the token expires.
	StatusSolved Status = "solved"
	// StatusDead means the task is in the dead letter; the outcome's Reason
	// and Error say why.
	StatusDead Status = "dead"
)

// Outcome is how a task ended, as it is stored on captcha.results.<id>, Wait
// returns it and `captchaq results` prints it. It is part of the wire
// contract: fields may be added; these keep their names and meaning.
type Outcome struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Status is StatusSolved or StatusDead.
	Status Status `json:"status"`
	// Solution is the answer: a JSON string for tokens and text, an object
	// for GeeTest ({challenge, validate, seccode}). Empty when the task is
	// dead, and when the token has expired (Wait then returns
	// ErrTokenExpired). The outcome message on captcha.results.<id> never
	// carries it: the token stream does, while the token lives (token.go).
	Solution json.RawMessage `json:"solution,omitempty"`
	// UserAgent is the user agent the token is bound to, when the service
	// names one (Turnstile; cloudflare_challenge, whose cookie is useless
	// without it); empty otherwise, and whenever Solution is.
	UserAgent string `json:"useragent,omitempty"`
	// Error is the code of a dead task's last failure: the API's code or a
	// pseudo-code (ERROR_PAGEURL, LOCAL_TIMEOUT, DEADLINE_PASSED,
	// INVALID_TASK, WORKER_LOST, …). Empty when solved.
	Error string `json:"error,omitempty"`
	// Reason is why the task is dead, a retry.Reason (permanent,
	// attempts-exhausted, invalid-task, expired, crashed); empty when solved.
	Reason string `json:"reason,omitempty"`
	// Detail says more about Error, in words, when known: the service's own
	// description of its code (its error_text), what failed on the way
	// ("read: connection reset by peer"), what is wrong with an invalid task
	// ("params.sitekey: required for method turnstile"), or why it was
	// canceled. Never a key, a token or a page URL's path.
	Detail string `json:"detail,omitempty"`
	// Attempts is how many solving attempts were spent on this submission
	// (capacity snoozes spend none), the successful one included.
	Attempts int `json:"attempts"`
	// SolveSeconds is the wall time of the successful attempt, from its start
	// to the answer, in seconds with millisecond precision; 0 when dead.
	SolveSeconds float64 `json:"solve_seconds,omitempty"`
	// ExpiresAt is when the token stops being usable (the solve's end plus
	// the method's token lifetime); the token leaves the token stream then.
	// Zero when dead.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Method is the task's method. It may be empty in an outcome Wait
	// rebuilds from the audit trail after the token expired.
	Method string `json:"method,omitempty"`
	// CaptchaID is the service's id of the captcha, for `captchaq report`;
	// empty when dead.
	CaptchaID string `json:"captcha_id,omitempty"`
	// SolvedAt is when the answer arrived; zero when dead.
	SolvedAt time.Time `json:"solved_at,omitzero"`
}

// Text returns the solution as plain text: the token or text answer itself,
// or the JSON of an object answer (GeeTest).
func (o *Outcome) Text() string {
	var s string
	if err := json.Unmarshal(o.Solution, &s); err == nil {
		return s
	}
	return string(o.Solution)
}

// truncate cuts s to n bytes (text.Cut).
func truncate(s string, n int) string { return text.Cut(s, n) }

// validateShape checks what Validate does except the deadline, which a
// worker judges itself (a passed deadline is expired, not invalid).
func (t *Task) validateShape() error {
	return t.Validate(time.Time{})
}

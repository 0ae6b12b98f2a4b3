package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/text"
)

// Task is one captcha to solve, as producers write it (one JSON object per
// task; JSON lines for the CLI).
type Task struct {
	// ID names the task; Submit generates one when it is empty. See ValidateID.
	ID string `json:"id,omitempty"`
	// Method is the solving service's method: userrecaptcha, turnstile,
	// geetest (v3; v4 with version=4), hcaptcha, cloudflare_challenge,
	// post, base64, bls (captcha.Methods).
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
	// UseAt is when the producer will use the token: the worker starts the
	// solve that long before it that the token arrives shortly before (the
	// kind's learned 90th-percentile solve time), so the token has most of
	// its lifetime left when it is used. Zero: solve at once.
	UseAt When `json:"use_at,omitzero"`
	// NotBefore is when the solve may start at the earliest: alone, a task
	// scheduled for then; with UseAt, a bound on how early it starts.
	NotBefore When `json:"not_before,omitzero"`
}

// Priority orders tasks: queued high-priority tasks start before normal
// ones, but a waiting normal task has one fetch in four of a worker
// (dispatcher.NormalShare), so no high-priority flood starves it. It is part of the wire contract (the task's "priority" and a
// token of its subject).
type Priority string

// The priorities.
const (
	PriorityHigh   Priority = "high"
	PriorityNormal Priority = "normal"
)

// Priorities lists every priority, in the order workers look at them.
// Callers must not modify it.
var Priorities = []Priority{PriorityHigh, PriorityNormal}

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
				return fmt.Errorf("params.%s: want a string, number or boolean, got %s", k, text.Cut(string(v), 40))
			}
			out[k] = string(v)
		}
	}
	*p = out
	return nil
}

// PageHost returns the host of a task's page URL (captcha.PageHost): what
// logs, events and dead letters show of it, never the whole URL.
func PageHost(p Params) string { return captcha.PageHost(p["pageurl"]) }

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
// *captcha.ValidationError.
func (e *TaskError) Unwrap() []error { return []error{ErrInvalidTask, e.Err} }

// Validate checks everything about a task that can be checked without the
// service: the id (when set), the method and its parameters (captcha.Validate,
// the one place that knows them), the priority, the deadline, and use_at and
// not_before (not passed by more than PastTolerance, not_before not after
// use_at, neither after the deadline).
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
	if err := captcha.Validate(t.Method, t.Params); err != nil {
		return wrap(err)
	}
	switch t.Priority {
	case "", PriorityNormal, PriorityHigh:
	default:
		return wrap(fmt.Errorf("priority %q: want %q or %q", t.Priority, PriorityHigh, PriorityNormal))
	}
	if !t.Deadline.IsZero() && !t.Deadline.After(now) {
		return wrap(fmt.Errorf("deadline %s: already passed", t.Deadline.Format(time.RFC3339)))
	}
	if err := t.checkSchedule(now); err != nil {
		return wrap(err)
	}
	return nil
}

// ValidateShape checks what Validate does except the deadline, which a
// worker judges itself (a passed deadline is expired, not invalid).
func (t *Task) ValidateShape() error {
	return t.Validate(time.Time{})
}

// Queue is the priority the task is queued at: PriorityHigh when it says
// so, PriorityNormal otherwise.
func (t *Task) Queue() Priority {
	if t.Priority == PriorityHigh {
		return PriorityHigh
	}
	return PriorityNormal
}

// ParseTask decodes one task from JSON, rejecting unknown fields so that a
// typo ("prority") is an error rather than a silently ignored setting.
func ParseTask(b []byte) (Task, error) {
	var t Task
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&t); err != nil {
		if ferr := scheduleFieldError(b); ferr != nil {
			return Task{}, &TaskError{Err: ferr}
		}
		return Task{}, &TaskError{Err: fmt.Errorf("not a task object: %w", err)}
	}
	if dec.More() {
		return Task{}, &TaskError{ID: t.ID, Err: errors.New("trailing data after the task object")}
	}
	return t, nil
}

// scheduleFieldError names use_at or not_before when one of them is what
// makes b unreadable, which the JSON decoder's error does not.
func scheduleFieldError(b []byte) error {
	var raw struct {
		UseAt     json.RawMessage `json:"use_at"`
		NotBefore json.RawMessage `json:"not_before"`
	}
	if json.Unmarshal(b, &raw) != nil {
		return nil
	}
	for _, f := range []struct {
		name string
		v    json.RawMessage
	}{{"use_at", raw.UseAt}, {"not_before", raw.NotBefore}} {
		if len(f.v) == 0 {
			continue
		}
		var w When
		if err := w.UnmarshalJSON(f.v); err != nil {
			return fmt.Errorf("%s: %w", f.name, err)
		}
	}
	return nil
}

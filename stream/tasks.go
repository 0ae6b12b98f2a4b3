package stream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/stream/wire"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TaskStatus is where a task that has not ended stands, as TaskOf and Tasks
// report it.
type TaskStatus string

// The statuses of a task. They are part of the wire contract of `captchaq
// task ls --json`.
const (
	// TaskQueued waits for a worker: never taken, handed back, or due again
	// after a retry delay.
	TaskQueued TaskStatus = "queued"
	// TaskSolving is at the solving service: its last event is an attempt.
	TaskSolving TaskStatus = "solving"
	// TaskRetrying waits out a retry (or capacity snooze) delay.
	TaskRetrying TaskStatus = "retrying"
	// TaskDone has its outcome; its task message is about to be deleted
	// (TaskOf only, for a task whose message is gone).
	TaskDone TaskStatus = "done"
)

// TaskInfo is a task that waits or runs, as `captchaq task ls` lists it. It
// never holds a page URL (the host only) or a token.
type TaskInfo struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Lane and Priority are those of the queue it waits in.
	Lane     Lane     `json:"lane"`
	Priority Priority `json:"priority"`
	// Gen is the stream sequence of its task message.
	Gen uint64 `json:"gen"`
	// Method and Host are the task's method and its page's host.
	Method string `json:"method,omitempty"`
	Host   string `json:"host,omitempty"`
	// Status is where it stands.
	Status TaskStatus `json:"status"`
	// Submitted is when its task message was stored.
	Submitted time.Time `json:"submitted"`
	// Attempts is how many attempts it has spent.
	Attempts int `json:"attempts"`
	// Worker names the worker of its last step, if any.
	Worker string `json:"worker,omitempty"`
	// LastCode is the code of its last failure, if any.
	LastCode string `json:"last_code,omitempty"`
	// RetryAt is when a retrying task is due again; zero otherwise.
	RetryAt time.Time `json:"retry_at,omitzero"`
	// Since is when its last step happened (its submission if none).
	Since time.Time `json:"since"`
	// Canceled is set once someone asked that it not be solved (Cancel):
	// a worker drops it at its next delivery instead of solving it.
	Canceled bool `json:"canceled,omitempty"`
}

// statusOf says where a task stands from its last event, given the
// generation of its task message.
func statusOf(last Event, gen uint64, now time.Time) (TaskStatus, time.Time) {
	if last.Gen != gen {
		return TaskQueued, time.Time{}
	}
	switch last.Kind {
	case EventAttempt:
		return TaskSolving, time.Time{}
	case EventRetry, EventSnooze:
		due := last.At.Add(time.Duration(last.DelayMS) * time.Millisecond)
		if now.Before(due) {
			return TaskRetrying, due
		}
		return TaskQueued, time.Time{}
	case EventSolved, EventDead:
		return TaskDone, time.Time{}
	}
	return TaskQueued, time.Time{}
}

// TaskFilter chooses what Tasks lists; its zero value lists every task that
// waits or runs.
type TaskFilter struct {
	// Lane, when set, lists that lane's tasks alone.
	Lane Lane
	// Status, when set, lists tasks of that status alone.
	Status TaskStatus
	// Limit stops the listing after this many tasks; 0: no limit.
	Limit int
}

// Tasks lists the tasks that wait or run, oldest first: every task message
// still in the stream (a finished task's message is deleted) whose event log
// does not end it. It reads each listed task's last event: one read per task.
func (c *Client) Tasks(ctx context.Context, f TaskFilter) ([]TaskInfo, error) {
	subject := wire.SubjectAllTasks
	if f.Lane != "" {
		subject = wire.SubjectTasks + "." + string(f.Lane) + ".>"
	}
	now := c.cfg.Now()
	var out []TaskInfo
	err := scanFrom(ctx, c, []string{subject}, 0, false, func(m jetstream.Msg) (bool, error) {
		md, err := m.Metadata()
		if err != nil {
			return false, err
		}
		ti, ok := taskInfoOf(m.Subject(), m.Data(), md.Sequence.Stream, md.Timestamp)
		if !ok {
			return false, nil
		}
		st, err := loadGen(ctx, c.s, ti.ID, ti.Gen)
		if err != nil {
			return false, err
		}
		c.fill(&ti, st.last, now)
		if st.outcome {
			ti.Status = TaskDone
		}
		if ti.Status == TaskDone || (f.Status != "" && ti.Status != f.Status) {
			return false, nil
		}
		if ti.Canceled, err = c.cancelRequested(ctx, ti.ID, st, m.Headers()); err != nil {
			return false, err
		}
		out = append(out, ti)
		return f.Limit > 0 && len(out) >= f.Limit, nil
	})
	if err != nil {
		return out, fmt.Errorf("list tasks: %w", err)
	}
	return out, nil
}

// taskInfoOf reads a task message's subject and body; false when the
// subject is not a task's.
func taskInfoOf(subject string, data []byte, seq uint64, at time.Time) (TaskInfo, bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 {
		return TaskInfo{}, false
	}
	ti := TaskInfo{ID: parts[4], Lane: Lane(parts[2]), Priority: Priority(parts[3]), Gen: seq, Submitted: at, Since: at}
	if t, err := ParseTask(data); err == nil {
		ti.Method, ti.Host = t.Method, wire.PageHost(t.Params)
	}
	return ti, true
}

func (c *Client) fill(ti *TaskInfo, last Event, now time.Time) {
	ti.Status, ti.RetryAt = statusOf(last, ti.Gen, now)
	if last.Gen == ti.Gen {
		ti.Attempts, ti.Worker, ti.LastCode, ti.Since = last.Attempts, last.Worker, last.LastCode, last.At
	}
}

// TaskOf returns where task id's latest submission stands. A task whose
// message is gone (it ended) is TaskDone; one the stream does not know is
// ErrNotFound.
func (c *Client) TaskOf(ctx context.Context, id string) (TaskInfo, error) {
	if err := ValidateID(id); err != nil {
		return TaskInfo{}, err
	}
	st, err := lastEvent(ctx, c.s, id)
	if err != nil {
		return TaskInfo{}, err
	}
	m, err := c.s.GetLastMsgForSubject(ctx, wire.TaskSubjectsFor(id))
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		if st.seq == 0 {
			return TaskInfo{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
		}
		ti := TaskInfo{ID: id, Gen: st.last.Gen, Method: st.last.Method, Host: st.last.Host, Submitted: st.last.Submitted}
		c.fill(&ti, st.last, c.cfg.Now())
		ti.Status = TaskDone
		return ti, nil
	case err != nil:
		return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
	}
	ti, _ := taskInfoOf(m.Subject, m.Data, m.Sequence, m.Time)
	gst, err := loadGen(ctx, c.s, id, ti.Gen)
	if err != nil {
		return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
	}
	c.fill(&ti, gst.last, c.cfg.Now())
	if gst.outcome {
		ti.Status = TaskDone // its message is about to be erased
	}
	if ti.Canceled, err = c.cancelRequested(ctx, id, gst, m.Header); err != nil {
		return ti, err
	}
	return ti, nil
}

// ErrTaskEnded is returned by Cancel for a task that already has its
// outcome.
var ErrTaskEnded = errors.New("task already ended")

// Cancel asks that task id's latest submission not be solved. A worker that
// delivers it next (queued, handed back, or due after a retry delay) ends it
// as dead with reason canceled, without calling the service. An attempt
// already at the service is not stopped: its answer is stored as usual
// (and paid for). Cancel returns where the task stood when the record was
// stored; ErrTaskEnded if it had ended.
//
// A task this Client submitted with Solve is canceled as its owner; any
// other needs an admin's credentials (nats.conf refuses anyone else).
func (c *Client) Cancel(ctx context.Context, id, reason string) (TaskInfo, error) {
	ti, err := c.TaskOf(ctx, id)
	if err != nil {
		return ti, err
	}
	if ti.Status == TaskDone {
		return ti, fmt.Errorf("cancel task %s: %w", id, ErrTaskEnded)
	}
	rec := CancelRecord{ID: id, Gen: ti.Gen, At: c.cfg.Now(), By: c.cfg.Name, Reason: text.Cut(reason, 100)}
	subject := wire.CancelRecordSubject(id)
	if secret, ok := c.cancelKeys.Load(id); ok {
		rec.Secret, subject = secret.(string), wire.CancelSubject(id, ti.Gen)
	}
	b, err := json.Marshal(rec)
	if err != nil {
		return ti, err
	}
	if _, err := c.js.Publish(ctx, subject, b); err != nil {
		return ti, fmt.Errorf("cancel task %s: %w", id, err)
	}
	ti.Canceled = true
	return ti, nil
}

// cancelRequested reports whether a valid cancel record names generation
// gen of task id, whose state is st and whose task message carries header h.
func (c *Client) cancelRequested(ctx context.Context, id string, st genState, h nats.Header) (bool, error) {
	rec, err := cancelOf(ctx, c.nc, c.top, id, st, h)
	return rec != nil, err
}

// ownerCancelScan is how many records of an owner's cancel subject a
// reader looks at, oldest first: one batched read, whatever is published.
const ownerCancelScan = 16

// cancelOf returns the valid cancel record of the generation of task id
// whose state is st, nil when there is none: an admin's (or an owner's
// that a worker relayed), which st holds, at no cost; else, for a task
// message that names a cancel hash (header h), an owner's whose secret
// matches it, among the first ownerCancelScan records on the owner's
// subject (they all come after the task message): one batched direct get.
// A task without a cancel hash costs nothing.
//
// Any producer may publish on an owner's subject. A forged record after
// the owner's does not hide it; forged records before it, more than
// ownerCancelScan of them, do here, and workers that run when the owner's
// record is stored relay it to the task's records anyway (relayCancels).
func cancelOf(ctx context.Context, nc *nats.Conn, top Topology, id string, st genState, h nats.Header) (*CancelRecord, error) {
	if st.cancel != nil {
		return st.cancel, nil
	}
	if h.Get(wire.HeaderCancelHash) == "" {
		return nil, nil // only an owner's task can have an owner's cancel
	}
	r, err := newDirectReader(nc, top)
	if err != nil {
		return nil, err
	}
	defer r.close()
	msgs, _, err := r.batchOf(ctx, wire.CancelSubject(id, st.gen), st.gen, ownerCancelScan)
	if err != nil {
		return nil, fmt.Errorf("read cancel records of task %s: %w", id, err)
	}
	for _, m := range msgs {
		if rec := wire.ParseCancel(m.data, st.gen); rec != nil && wire.OwnsCancel(h, rec.Secret) {
			return rec, nil
		}
	}
	return nil, nil
}

// canceled reports whether the delivered generation was canceled, and the
// dead letter's detail if so. A failed read is taken as "not canceled": a
// cancel is a request, and losing one to a broker hiccup costs a solve, not
// a task.
func (d *delivery) canceled(ctx context.Context) (string, bool) {
	rec, err := cancelOf(ctx, d.w.nc, d.w.top, d.id, d.st, d.m.Headers())
	if err != nil {
		d.log.Warn("cannot read the task's cancel record; solving it", slog.Any("error", err))
		return "", false
	}
	if rec == nil {
		return "", false
	}
	return wire.CancelDetail(rec), true
}

var urlInText = regexp.MustCompile(`[A-Za-z][A-Za-z0-9+.-]*://[^\s"'<>()\[\]{}]*`)

// safeDetail is a dead letter's detail as outcomes and the audit trail may
// carry it: at most 300 bytes, any URL in it replaced by its host.
func safeDetail(s string) string {
	s = urlInText.ReplaceAllStringFunc(s, func(u string) string {
		if h := wire.PageHost(Params{"pageurl": u}); h != "" && h != "invalid-url" {
			return "<url on " + h + ">"
		}
		return "<url>"
	})
	return text.Cut(s, 300)
}

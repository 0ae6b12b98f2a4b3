package stream

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
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
	// TaskScheduled is not due yet (use_at, not_before): it waits in the
	// stream until StartAt.
	TaskScheduled TaskStatus = "scheduled"
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
	// UseAt and NotBefore are the task's, as instants (zero: none).
	UseAt     time.Time `json:"use_at,omitzero"`
	NotBefore time.Time `json:"not_before,omitzero"`
	// Deadline is the task's deadline (zero: none), after which a worker
	// ends it dead with DEADLINE_PASSED instead of solving it.
	Deadline time.Time `json:"deadline,omitzero"`
	// StartAt is when a scheduled task's solve starts, as its worker
	// recorded it; zero otherwise.
	StartAt time.Time `json:"start_at,omitzero"`
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
	case EventAttempt, EventAccepted, EventHeld, EventAnswered:
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
	// Method, when set, lists tasks of that method alone.
	Method string
	// Limit stops the listing after this many tasks; 0: no limit.
	Limit int
}

// Tasks lists the tasks that wait or run, oldest first: every task message
// still in the stream (a finished task's message is deleted) whose event log
// does not end it. It reads each listed task's last event: one read per task.
func (c *Client) Tasks(ctx context.Context, f TaskFilter) ([]TaskInfo, error) {
	now := c.cfg.Now()
	var out []TaskInfo
	// A task moving between its lane and the waiting room may be in both
	// for a moment: listed once.
	type genKey struct {
		id  string
		gen uint64
	}
	seen := map[genKey]bool{}
	err := c.rd.ScanFrom(ctx, taskMessageSubjects(f.Lane), 0, false, func(m taskstore.Record) (bool, error) {
		ti, ok := taskInfoOf(m.Subject, m.Header, m.Data, m.Seq, m.Stored)
		key := genKey{ti.ID, ti.Gen}
		if !ok || seen[key] {
			return false, nil
		}
		seen[key] = true
		st, err := c.rd.LoadGen(ctx, ti.ID, ti.Gen)
		if err != nil {
			return false, err
		}
		c.fill(&ti, st.Last, now)
		if st.Outcome {
			ti.Status = TaskDone
		}
		if ti.Status == TaskDone || (f.Status != "" && ti.Status != f.Status) || (f.Method != "" && ti.Method != f.Method) {
			return false, nil
		}
		if ti.Canceled, err = c.cancelRequested(ctx, ti.ID, st, m.Header); err != nil {
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

// taskMessageSubjects are the subjects of the task messages of a lane
// ("": of every lane): its task subjects and its waiting room's.
func taskMessageSubjects(lane Lane) []string {
	if lane == "" {
		return []string{wire.SubjectAllTasks, wire.SubjectAllLater}
	}
	return []string{wire.SubjectTasks + "." + string(lane) + ".>", wire.SubjectLater + "." + string(lane) + ".>"}
}

// taskInfoOf reads a task message's subject, headers and body; false when
// the subject is not a task's.
func taskInfoOf(subject string, h nats.Header, data []byte, seq uint64, at time.Time) (TaskInfo, bool) {
	parts := strings.Split(subject, ".")
	if len(parts) != 5 {
		return TaskInfo{}, false
	}
	seq, at = wire.TaskMessageGen(h, seq, at)
	ti := TaskInfo{ID: parts[4], Lane: Lane(parts[2]), Priority: Priority(parts[3]), Gen: seq, Submitted: at, Since: at}
	if t, err := ParseTask(data); err == nil {
		ti.Method, ti.Host = t.Method, wire.PageHost(t.Params)
		ti.UseAt, ti.NotBefore = t.UseAt.From(ti.Submitted), t.NotBefore.From(ti.Submitted)
		ti.Deadline = t.Deadline
	}
	return ti, true
}

func (c *Client) fill(ti *TaskInfo, last Event, now time.Time) {
	ti.Status, ti.RetryAt = statusOf(last, ti.Gen, now)
	if last.Kind == EventScheduled && last.Gen == ti.Gen && now.Before(last.Until) {
		ti.Status, ti.StartAt = TaskScheduled, last.Until
	}
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
	st, err := c.rd.LastEvent(ctx, id)
	if err != nil {
		return TaskInfo{}, err
	}
	m, ok, err := c.rd.LastTaskMessage(ctx, wire.TaskMessagesFor(id), id)
	switch {
	case err == nil && !ok:
		if st.Seq == 0 {
			return TaskInfo{}, fmt.Errorf("task %s: %w", id, ErrNotFound)
		}
		ti := TaskInfo{ID: id, Gen: st.Last.Gen, Method: st.Last.Method, Host: st.Last.Host, Submitted: st.Last.Submitted}
		c.fill(&ti, st.Last, c.cfg.Now())
		ti.Status = TaskDone
		return ti, nil
	case err != nil:
		return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
	}
	ti, _ := taskInfoOf(m.Subject, m.Header, m.Data, m.Seq, m.Stored)
	gst, err := c.rd.LoadGen(ctx, id, ti.Gen)
	if err != nil {
		return TaskInfo{}, fmt.Errorf("task %s: %w", id, err)
	}
	c.fill(&ti, gst.Last, c.cfg.Now())
	if gst.Outcome {
		ti.Status = TaskDone // its message is about to be erased
	}
	if ti.Canceled, err = c.cancelRequested(ctx, id, gst, m.Header); err != nil {
		return ti, err
	}
	return ti, nil
}

// Workers returns the workers seen within HeartbeatTTL, by name, from their
// last heartbeats; a worker that said it stopped is listed with Stopped
// until its heartbeat expires. Seen on the broker's clock, when the
// heartbeat was stored: a worker's clock may be off (its At says when on
// that clock).
func (c *Client) Workers(ctx context.Context) ([]WorkerInfo, error) {
	beats, err := c.rd.LastOfEach(ctx, wire.SubjectWorkers+".>")
	if err != nil {
		return nil, fmt.Errorf("list workers: %w", err)
	}
	now := c.brokerNow()
	var out []WorkerInfo
	for _, m := range beats {
		var wi WorkerInfo
		if json.Unmarshal(m.Data, &wi) != nil || wi.Name == "" || now.Sub(m.Stored) > HeartbeatTTL {
			continue
		}
		out = append(out, wi)
	}
	slices.SortFunc(out, func(a, b WorkerInfo) int { return strings.Compare(a.Name, b.Name) })
	return out, nil
}

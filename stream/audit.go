package stream

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// TraceEntry is one step in the life of a task, for audits, as Trace returns
// it and `captchaq trace --json` prints it. It never holds a token or a page
// URL (page hosts only). It is part of the wire contract: fields may be
// added; these keep their names and meaning.
type TraceEntry struct {
	// Seq is the stream sequence of the message the step was read from (for
	// a submission whose task message is gone, the task message's own).
	Seq uint64 `json:"seq"`
	// At is when the step happened.
	At time.Time `json:"at"`
	// Kind names the step: submitted, attempt, retry, snooze, handback,
	// scheduled, solved, dead (event log); outcome, dead-letter, replayed, cancel (the
	// stored records; cancel: an admin's, or an owner's a worker relayed).
	Kind string `json:"kind"`
	// Gen is the generation (task message) the step belongs to.
	Gen uint64 `json:"gen"`
	// Attempt is how many attempts the generation had spent at this step; 0
	// (omitted) when none or not applicable.
	Attempt int `json:"attempt,omitempty"`
	// Worker is the name of the worker that took the step; empty for
	// producer-side steps.
	Worker string `json:"worker,omitempty"`
	// Client is the name of the producer that submitted or replayed the
	// task; empty when unnamed or not applicable.
	Client string `json:"client,omitempty"`
	// Code is the API code or pseudo-code of the failure behind the step;
	// empty for attempts and successes.
	Code string `json:"code,omitempty"`
	// Reason is the retry.Reason of a dead task; empty otherwise.
	Reason string `json:"reason,omitempty"`
	// Delay is the wait before the next delivery (retry, snooze); 0
	// otherwise. In JSON it is an integer of nanoseconds.
	Delay time.Duration `json:"delay,omitempty"`
	// Provider names the provider of the step's captcha (accepted, held,
	// answered, handback, retry, solved, outcome), when the worker solves
	// through several (package provider).
	Provider string `json:"provider,omitempty"`
	// Detail is a human-readable note on the step (method and page host,
	// delivery number, solve time, error detail); its wording may change.
	Detail string `json:"detail,omitempty"`
}

// Trace returns the life of task id, oldest first: each submission (when,
// from which client), each attempt (worker, start, end, error code), each
// retry and its delay, the outcome or dead letter, and any replay.
func (c *Client) Trace(ctx context.Context, id string) ([]TraceEntry, error) {
	if err := ValidateID(id); err != nil {
		return nil, err
	}
	subjects := []string{wire.TaskMessagesFor(id), wire.IDSubjects(id)}
	var out []TraceEntry
	submitted := map[uint64]bool{}
	lastAccepted := map[uint64]bool{} // by generation: the last event is an accepted one
	err := c.rd.ScanFrom(ctx, subjects, 0, false, func(m taskstore.Record) (bool, error) {
		e := TraceEntry{Seq: m.Seq, At: m.Stored}
		h := m.Header
		switch subj := m.Subject; {
		case strings.HasPrefix(subj, wire.SubjectTasks+".") || wire.InWaitingRoom(subj):
			if gen, _ := wire.TaskMessageGen(h, e.Seq, e.At); gen != e.Seq {
				return false, nil // a copy moved to the waiting room or back: not a submission
			}
			e.Kind, e.Gen, e.Client = "submitted", e.Seq, h.Get(wire.HeaderClient)
			submitted[e.Gen] = true
			e.Detail = "subject " + subj
			if t, err := ParseTask(m.Data); err == nil {
				e.Detail = fmt.Sprintf("%s on %s, priority %s, deadline %s", t.Method, wire.PageHost(t.Params), t.Queue(), t.Deadline.Format(time.RFC3339))
			}
			if r := h.Get(wire.HeaderReplayedBy); r != "" {
				e.Detail += ", replay of dead letter " + r
			}
		case strings.HasPrefix(subj, wire.SubjectEvents+"."):
			var ev Event
			if err := json.Unmarshal(m.Data, &ev); err != nil {
				return false, nil
			}
			if !submitted[ev.Gen] && !ev.Submitted.IsZero() {
				// The task message is deleted once the task is done; its
				// events remember when and by whom it was submitted.
				submitted[ev.Gen] = true
				out = append(out, TraceEntry{Seq: ev.Gen, At: ev.Submitted, Kind: "submitted", Gen: ev.Gen, Client: ev.Client,
					Detail: "on " + ev.Host})
			}
			e.Kind, e.Gen, e.Attempt, e.Worker, e.Reason = string(ev.Kind), ev.Gen, ev.Attempts, ev.Worker, ev.Reason
			e.Code, e.Delay, e.At = cmp.Or(ev.Code, ev.LastCode), time.Duration(ev.DelayMS)*time.Millisecond, ev.At
			e.Provider = ev.Provider
			switch ev.Kind {
			case EventAttempt:
				e.Code = ""
				e.Detail = fmt.Sprintf("delivery %d", ev.Delivery)
				if ev.Crashed {
					e.Detail += ", the previous attempt died with its worker"
				}
				if ev.Crashed && !lastAccepted[ev.Gen] {
					// Its in.php call, if it made one, has no record: a
					// reply lost with the worker is the one case no one
					// can know about.
					e.Detail += " before the service's word on its captcha was recorded (a captcha it submitted may have been paid)"
				}
				lastAccepted[ev.Gen] = false
			case EventAccepted:
				e.Code = ""
				e.Detail = acceptedDetail(ev)
				if ev.Provider != "" {
					e.Detail += " (provider " + ev.Provider + ")"
				}
				lastAccepted[ev.Gen] = true
			case EventHeld:
				e.Detail = fmt.Sprintf("captcha %s held through an outage since %s: the service gives no word of it; kept and polled again",
					ev.CaptchaID, ev.HeldSince.Format(time.RFC3339Nano))
				lastAccepted[ev.Gen] = true
			case EventAnswered:
				e.Code = ""
				e.Detail = fmt.Sprintf("captcha %s polled again at %s: the service answers about it again (held since %s)",
					ev.CaptchaID, ev.At.Format(time.RFC3339Nano), ev.HeldSince.Format(time.RFC3339Nano))
				lastAccepted[ev.Gen] = true
			case EventSolved:
				e.Detail = fmt.Sprintf("in %.1fs, token valid until %s", ev.Seconds, ev.ExpiresAt.Format(time.RFC3339))
				if ev.CaptchaID != "" {
					e.Detail = "captcha " + ev.CaptchaID + " solved " + e.Detail
				}
			case EventDead:
				e.Detail = ev.Detail
				if ev.CaptchaID != "" {
					e.Detail = strings.TrimPrefix(e.Detail+";"+captchaFate(ev), ";")
				}
			case EventRetry, EventSnooze, EventHandback:
				e.Detail = fmt.Sprintf("after %.1fs", ev.Seconds)
				if ev.CaptchaID != "" {
					e.Detail += captchaFate(ev)
				}
				if ev.Detail != "" {
					e.Detail += "; " + ev.Detail
				}
				lastAccepted[ev.Gen] = false
			case EventScheduled:
				e.Detail = "not due: waits in the stream until " + ev.Until.Format(time.RFC3339Nano)
				if ev.LeadMS > 0 {
					e.Detail += fmt.Sprintf(", %.1fs before use_at", float64(ev.LeadMS)/1000)
				}
			}
		case strings.HasPrefix(subj, wire.SubjectResults+"."):
			var o Outcome
			_ = json.Unmarshal(m.Data, &o)
			e.Kind, e.Attempt, e.Code, e.Reason, e.Provider = "outcome", o.Attempts, o.Error, o.Reason, o.Provider
			e.Gen, _ = strconv.ParseUint(h.Get(wire.HeaderGen), 10, 64)
			e.Detail = "status " + string(o.Status)
			if o.CaptchaID != "" {
				e.Detail += ", captcha " + o.CaptchaID
			}
			if o.Status == StatusSolved {
				e.Detail += fmt.Sprintf(", in %.1fs, token valid until %s", o.SolveSeconds, o.ExpiresAt.Format(time.RFC3339))
				if !o.UseAt.IsZero() {
					e.Detail += fmt.Sprintf(", %.1fs of it left at use_at %s", o.LifetimeAtUseS, o.UseAt.Format(time.RFC3339))
				}
				if o.Provider != "" {
					e.Detail += fmt.Sprintf(", by provider %s at %s (%s)", o.Provider, strconv.FormatFloat(o.Cost, 'f', -1, 64), o.CostBasis)
				}
			}
		case strings.HasPrefix(subj, wire.SubjectDead+"."):
			d := wire.ParseDeadLetter(subj, h, m.Data, e.Seq, e.At)
			e.Kind, e.Gen, e.Attempt, e.Code, e.Reason = "dead-letter", d.Gen, d.Attempts, d.Error, string(d.Reason)
		case subj == wire.CancelRecordSubject(id):
			var r wire.CancelRecord
			_ = json.Unmarshal(m.Data, &r)
			e.Kind, e.Client, e.Gen, e.At = "cancel", r.By, r.Gen, m.Stored
			e.Detail = wire.CancelDetail(&r)
		case strings.HasPrefix(subj, wire.SubjectReplays+"."):
			var r Replay
			_ = json.Unmarshal(m.Data, &r)
			if r.TaskSeq == 0 {
				// A replay's first record, written before it queued
				// anything: its task message shows as the next
				// submission, and the final record as the replay.
				return false, nil
			}
			e.Kind, e.Client, e.Gen = "replayed", r.By, r.TaskSeq
			e.Detail = fmt.Sprintf("dead letter %d replayed as task message %d", r.DeadSeq, r.TaskSeq)
		default:
			return false, nil // not a record of the task (a worker named like it)
		}
		out = append(out, e)
		return false, nil
	})
	if err != nil {
		return nil, fmt.Errorf("trace %s: %w", id, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("trace %s: %w", id, ErrNotFound)
	}
	// Stream order, except the submissions remembered by events (their task
	// messages are gone), which go back to when they happened.
	slices.SortStableFunc(out, func(a, b TraceEntry) int { return a.At.Compare(b.At) })
	return out, nil
}

// acceptedDetail says which captcha the service accepted for an attempt,
// and how: submitted, resumed from a worker that died or stopped, or
// submitted in place of one the service no longer knew.
func acceptedDetail(ev Event) string {
	at := ev.AcceptedAt.Format(time.RFC3339Nano)
	switch {
	case ev.Resumed:
		return fmt.Sprintf("captcha %s (accepted %s) resumed by %s: polled again, not paid again", ev.CaptchaID, at, ev.Worker)
	case ev.Replaces != "":
		return fmt.Sprintf("captcha %s accepted %s in place of captcha %s, unknown at the service (%s)", ev.CaptchaID, at, ev.Replaces, ev.Code)
	}
	return fmt.Sprintf("captcha %s accepted by the service %s", ev.CaptchaID, at)
}

// captchaFate says what became of the captcha an attempt that ended
// without a solve polled, from the event that ended it.
func captchaFate(ev Event) string {
	switch {
	case ev.Kind == EventHandback:
		return fmt.Sprintf(", captcha %s left to the next delivery, which polls it again", ev.CaptchaID)
	case classic.CaptchaUnknown(ev.Code):
		return fmt.Sprintf(", captcha %s unknown at the service (%s)", ev.CaptchaID, ev.Code)
	case ev.Code != "":
		return fmt.Sprintf(", captcha %s: %s", ev.CaptchaID, ev.Code)
	}
	return ", captcha " + ev.CaptchaID
}

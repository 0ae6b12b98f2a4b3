package dashboard

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// cached holds one read of the stream shared by every request: it is read
// again once it is older than the refresh interval, or than four times what
// the last read took, whichever is longer, so a slow read of a big stream
// does not run back to back. Concurrent requests wait for one read.
type cached[T any] struct {
	mu   sync.Mutex
	at   time.Time
	took time.Duration
	v    T
}

func (c *cached[T]) get(ctx context.Context, fresh time.Duration, read func(context.Context) (T, error)) (T, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.at.IsZero() && time.Since(c.at) < max(fresh, 4*c.took) {
		return c.v, nil
	}
	start := time.Now()
	v, err := read(ctx)
	if err != nil {
		return v, err
	}
	c.v, c.at, c.took = v, time.Now(), time.Since(start)
	return v, nil
}

// drop forgets the cached read: after a change, the next request reads anew.
func (c *cached[T]) drop() {
	c.mu.Lock()
	c.at = time.Time{}
	c.mu.Unlock()
}

// outcomesWindow is how far back the outcome list reaches.
const outcomesWindow = 24 * time.Hour

// Page sizes of the lists.
const (
	defaultPageSize = 25
	maxPageSize     = 200
)

// page is one page of a list, with how many items the filter keeps and the
// values the filters offer.
type page[T any] struct {
	Total   int      `json:"total"`
	Offset  int      `json:"offset"`
	Limit   int      `json:"limit"`
	Items   []T      `json:"items"`
	Methods []string `json:"methods"`
	// MaxSeq is, for dead letters, the newest letter the filter keeps: a
	// bulk change confirmed for this list acts on none newer.
	MaxSeq uint64 `json:"max_seq,omitempty"`
}

// query is a list's filter, from a GET's query string or a bulk change's
// JSON body. Empty fields keep everything.
type query struct {
	State    string `json:"state"`    // tasks: queued, solving, retrying, canceled
	Lane     string `json:"lane"`     // tasks
	Priority string `json:"priority"` // tasks
	Status   string `json:"status"`   // outcomes: solved, dead
	Method   string `json:"method"`
	Reason   string `json:"reason"`   // outcomes, dead letters
	Replayed string `json:"replayed"` // dead letters: yes, no
	ID       string `json:"id"`       // a part of the task id
	Since    string `json:"since"`    // RFC 3339, or a duration back from now ("15m")
	Until    string `json:"until"`
	Offset   string `json:"offset"`
	Limit    string `json:"limit"`
	// Upto is, for a bulk change, the newest dead letter (sequence) the
	// operator saw when confirming; 0 for a list.
	Upto uint64 `json:"upto"`
}

func queryOf(v url.Values) query {
	return query{State: v.Get("state"), Lane: v.Get("lane"), Priority: v.Get("priority"), Status: v.Get("status"), Method: v.Get("method"),
		Reason: v.Get("reason"), Replayed: v.Get("replayed"), ID: v.Get("id"), Since: v.Get("since"), Until: v.Get("until"),
		Offset: v.Get("offset"), Limit: v.Get("limit")}
}

// filter is a query checked and parsed.
type filter struct {
	query
	since, until  time.Time
	offset, limit int
}

func oneOf(name, v string, allowed ...string) error {
	if v == "" || slices.Contains(allowed, v) {
		return nil
	}
	return fmt.Errorf("%s %q: want one of %s", name, v, strings.Join(allowed, ", "))
}

func (q query) parse(now time.Time) (filter, error) {
	f := filter{query: q, limit: defaultPageSize}
	var errs []string
	check := func(err error) {
		if err != nil {
			errs = append(errs, err.Error())
		}
	}
	check(oneOf("state", q.State, "queued", "solving", "retrying", "canceled"))
	lanes := make([]string, len(stream.Lanes))
	for i, l := range stream.Lanes {
		lanes[i] = string(l)
	}
	check(oneOf("lane", q.Lane, lanes...))
	check(oneOf("priority", q.Priority, string(stream.PriorityHigh), string(stream.PriorityNormal)))
	check(oneOf("status", q.Status, string(stream.StatusSolved), string(stream.StatusDead)))
	reasons := make([]string, len(retry.Reasons))
	for i, r := range retry.Reasons {
		reasons[i] = string(r)
	}
	check(oneOf("reason", q.Reason, reasons...))
	check(oneOf("replayed", q.Replayed, "yes", "no"))
	if why := captcha.NotAMethod(q.Method); q.Method != "" && why != "" {
		check(fmt.Errorf("method %q: %s", q.Method, why))
	}
	at := func(name, s string) time.Time {
		if s == "" {
			return time.Time{}
		}
		if d, err := time.ParseDuration(s); err == nil && d > 0 {
			return now.Add(-d)
		}
		t, err := time.Parse(time.RFC3339, s)
		if err != nil {
			check(fmt.Errorf("%s %q: want an RFC 3339 time or a duration back from now (15m)", name, s))
		}
		return t
	}
	f.since, f.until = at("since", q.Since), at("until", q.Until)
	num := func(name, s string, lo, hi int) int {
		n, err := strconv.Atoi(s)
		if err != nil || n < lo || n > hi {
			check(fmt.Errorf("%s %q: want a number from %d to %d", name, s, lo, hi))
		}
		return n
	}
	if q.Offset != "" {
		f.offset = num("offset", q.Offset, 0, 1<<30)
	}
	if q.Limit != "" {
		f.limit = num("limit", q.Limit, 1, maxPageSize)
	}
	if len(errs) > 0 {
		return f, fmt.Errorf("%w: %s", errBadRequest, strings.Join(errs, "; "))
	}
	return f, nil
}

func (f filter) within(t time.Time) bool {
	return (f.since.IsZero() || !t.Before(f.since)) && (f.until.IsZero() || !t.After(f.until))
}

func (f filter) idMatch(id string) bool { return f.ID == "" || strings.Contains(id, f.ID) }

func (f filter) task(t stream.TaskInfo) bool {
	state := f.State == "" || (f.State == "canceled" && t.Canceled) || (f.State != "canceled" && string(t.Status) == f.State)
	return state && (f.Lane == "" || string(t.Lane) == f.Lane) && (f.Priority == "" || string(t.Priority) == f.Priority) &&
		(f.Method == "" || t.Method == f.Method) && f.idMatch(t.ID) && f.within(t.Submitted)
}

func (f filter) outcome(o stream.OutcomeRecord) bool {
	return (f.Status == "" || string(o.Status) == f.Status) && (f.Method == "" || o.Method == f.Method) &&
		(f.Reason == "" || o.Reason == f.Reason) && f.idMatch(o.ID) && f.within(o.At)
}

func (f filter) deadLetter(d stream.DeadLetter) bool {
	return (f.Method == "" || d.Method == f.Method) && (f.Reason == "" || string(d.Reason) == f.Reason) &&
		(f.Replayed == "" || (f.Replayed == "yes") == (d.Replayed != nil)) && f.idMatch(d.ID) && f.within(d.DeadAt) &&
		(f.Upto == 0 || d.Seq <= f.Upto)
}

// paginate keeps what keep keeps, in order, and cuts out f's page.
func paginate[T any](items []T, f filter, keep func(T) bool, method func(T) string) page[T] {
	p := page[T]{Offset: f.offset, Limit: f.limit, Items: []T{}, Methods: []string{}}
	methods := map[string]bool{}
	for _, it := range items {
		if m := method(it); captcha.Known(m) { // a filter by another is refused
			methods[m] = true
		}
		if !keep(it) {
			continue
		}
		if p.Total >= f.offset && len(p.Items) < f.limit {
			p.Items = append(p.Items, it)
		}
		p.Total++
	}
	for m := range methods {
		p.Methods = append(p.Methods, m)
	}
	slices.Sort(p.Methods)
	return p
}

func (d *Dashboard) fresh() time.Duration { return d.cfg.Refresh }

func (d *Dashboard) readTasks(ctx context.Context) ([]stream.TaskInfo, error) {
	return d.tasks.get(ctx, d.fresh(), func(ctx context.Context) ([]stream.TaskInfo, error) {
		return d.cfg.Client.Tasks(ctx, stream.TaskFilter{})
	})
}

// readOutcomes reads the outcomes of the window, newest first.
func (d *Dashboard) readOutcomes(ctx context.Context) ([]stream.OutcomeRecord, error) {
	return d.outcomes.get(ctx, d.fresh(), func(ctx context.Context) ([]stream.OutcomeRecord, error) {
		out, err := d.cfg.Client.OutcomeRecords(ctx, time.Now().Add(-outcomesWindow))
		slices.Reverse(out)
		return out, err
	})
}

// readDead reads the dead letters, newest first, without their tasks (which
// hold page URLs).
func (d *Dashboard) readDead(ctx context.Context) ([]stream.DeadLetter, error) {
	return d.dead.get(ctx, d.fresh(), func(ctx context.Context) ([]stream.DeadLetter, error) {
		out, err := d.cfg.Client.DeadLetters(ctx, stream.DeadFilter{})
		for i := range out {
			out[i].Task = nil
		}
		slices.Reverse(out)
		return out, err
	})
}

// readHistory reads the history over one of historySpans, by name.
func (d *Dashboard) readHistory(ctx context.Context, name string) ([]stream.HistoryPoint, error) {
	for _, s := range historySpans {
		if s.name == name {
			return d.history[name].get(ctx, max(d.fresh(), 5*time.Second, s.step/4), func(ctx context.Context) ([]stream.HistoryPoint, error) {
				return d.cfg.Client.History(ctx, time.Now().Add(-s.span), s.step)
			})
		}
	}
	names := make([]string, len(historySpans))
	for i, s := range historySpans {
		names[i] = s.name
	}
	return nil, fmt.Errorf("%w: span %q: want one of %s", errBadRequest, name, strings.Join(names, ", "))
}

// list answers a list request: the filter from the query string, the read,
// and the page.
func list[T any](d *Dashboard, w http.ResponseWriter, r *http.Request, read func(context.Context) ([]T, error),
	keep func(filter, T) bool, method func(T) string, post func(*page[T], []T, filter)) {
	f, err := queryOf(r.URL.Query()).parse(time.Now())
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	items, err := read(r.Context())
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	p := paginate(items, f, func(it T) bool { return keep(f, it) }, method)
	if post != nil {
		post(&p, items, f)
	}
	writeJSON(w, http.StatusOK, p)
}

// rowsOf reads with read and makes each item a row, in the order read
// returns them: the rows a list shows.
func rowsOf[T, R any](read func(context.Context) ([]T, error), row func(T) R) func(context.Context) ([]R, error) {
	return func(ctx context.Context) ([]R, error) {
		items, err := read(ctx)
		rows := make([]R, len(items))
		for i, it := range items {
			rows[i] = row(it)
		}
		return rows, err
	}
}

// taskRow is a task as the list shows it.
type taskRow struct {
	stream.TaskInfo
	// Cancelable: it has not ended and nobody asked to cancel it yet.
	Cancelable bool `json:"cancelable"`
}

func (d *Dashboard) taskList(w http.ResponseWriter, r *http.Request) {
	read := rowsOf(d.readTasks, func(t stream.TaskInfo) taskRow {
		return taskRow{TaskInfo: t, Cancelable: !t.Canceled && t.Status != stream.TaskDone}
	})
	list(d, w, r, read, func(f filter, t taskRow) bool { return f.task(t.TaskInfo) }, func(t taskRow) string { return t.Method }, nil)
}

func (d *Dashboard) outcomeList(w http.ResponseWriter, r *http.Request) {
	list(d, w, r, d.readOutcomes, filter.outcome, func(o stream.OutcomeRecord) string { return o.Method }, nil)
}

// deadRow is a dead letter as the list shows it.
type deadRow struct {
	stream.DeadLetter
	// Replayable: not replayed yet, the latest letter of its task, holding
	// a valid task that was not canceled.
	Replayable bool `json:"replayable"`
}

func (d *Dashboard) deadList(w http.ResponseWriter, r *http.Request) {
	// One request, one read: seen covers the letters of that read.
	seen := map[string]bool{} // newest first: the first of an id is its latest
	read := rowsOf(d.readDead, func(x stream.DeadLetter) deadRow {
		row := deadRow{DeadLetter: x, Replayable: replayable(x) && !seen[x.ID]}
		seen[x.ID] = true
		return row
	})
	list(d, w, r, read, func(f filter, x deadRow) bool { return f.deadLetter(x.DeadLetter) }, func(x deadRow) string { return x.Method },
		func(p *page[deadRow], rows []deadRow, f filter) {
			for _, x := range rows {
				if f.deadLetter(x.DeadLetter) {
					p.MaxSeq = max(p.MaxSeq, x.Seq)
				}
			}
		})
}

// replayable says whether a dead letter may go back onto the queue: a
// canceled task was stopped on purpose, an invalid one would die again.
func replayable(x stream.DeadLetter) bool {
	return x.Replayed == nil && x.Method != "" && x.Reason != retry.ReasonCanceled && x.Reason != retry.ReasonInvalidTask
}

// historyJSON answers the history over ?span= (one of historySpans; 1h
// when not given).
func (d *Dashboard) historyJSON(w http.ResponseWriter, r *http.Request) {
	span := r.URL.Query().Get("span")
	if span == "" {
		span = historySpans[0].name
	}
	h, err := d.readHistory(r.Context(), span)
	if errors.Is(err, errBadRequest) {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		return
	}
	if err != nil {
		writeJSON(w, http.StatusBadGateway, map[string]string{"error": err.Error()})
		return
	}
	writeJSON(w, http.StatusOK, h)
}

// changed forgets the cached lists a change may have changed.
func (d *Dashboard) changed() {
	d.tasks.drop()
	d.outcomes.drop()
	d.dead.drop()
}

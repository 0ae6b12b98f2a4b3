// The gateway's memory of its tasks: the outcomes it follows from the
// stream, the generation each submission got, and the sweep that forgets
// finished and abandoned tasks.

package gateway

import (
	"cmp"
	"context"
	"encoding/json"
	"log/slog"
	"strconv"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/stream"
)

// entry is a task the gateway submitted, while it remembers it.
type entry struct {
	caller   *caller
	num      string // the id the caller knows
	gen      uint64 // the generation its submission got; 0 until Submit returns
	method   string
	callback callback
	from     string // the caller's address
	// sent is when it was submitted (real time: where a restarted
	// follower starts); deadline is when the task stops being useful.
	sent, deadline time.Time
	done           bool
	doneAt         time.Time
	out            stream.Outcome
	// early are outcomes stored under the id before Submit returned its
	// generation (at most maxEarly; overflow says more came): the one of
	// that generation, if among them, is the task's.
	early    []genOutcome
	overflow bool
}

// genOutcome is an outcome and the generation it ends.
type genOutcome struct {
	out stream.Outcome
	gen uint64
}

// maxEarly bounds the outcomes an entry keeps while its generation is not
// known yet: a submission's own outcome cannot come before it is stored,
// so more than a few are someone else's.
const maxEarly = 4

// pastTask is a forgotten task's generation, and when it was forgotten.
type pastTask struct {
	gen uint64
	at  time.Time
}

// keepDone is how long a finished task's outcome stays in memory; after
// that, polls read it from the stream. Its token is dropped from memory
// at its expiry in any case.
const keepDone = 10 * time.Minute

// follow keeps the outcomes of the gateway's tasks in memory as the stream
// stores them, and sends their pingbacks. One reader for every task: a
// poll of an unfinished task costs no broker call. On a read error it
// starts again a little before the time it stopped.
func (g *Gateway) follow(since time.Time) {
	defer g.bg.Done()
	for g.ctx.Err() == nil {
		err := g.reader.GenOutcomesSince(g.ctx, since, true, g.record)
		if g.ctx.Err() != nil {
			return
		}
		g.log.Warn("following outcomes stopped; starting again", slog.Any("error", err))
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		since = g.oldestPending(time.Now().Add(-time.Second))
	}
}

// oldestPending is a little before the submission of the oldest task the
// gateway waits for, or def when it waits for none: a follower started
// there misses no outcome of them.
func (g *Gateway) oldestPending(def time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.tasks {
		if !e.done && e.sent.Before(def) {
			def = e.sent
		}
	}
	return def.Add(-time.Second)
}

// janitor sweeps every 30 s until Close.
func (g *Gateway) janitor() {
	defer g.bg.Done()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-tick.C:
			g.sweep()
			g.admit.sweep(g.cfg.Now())
		}
	}
}

// record takes an outcome the stream stored under generation gen: the
// end of a task the gateway waits for when gen is the generation its
// submission got, else nothing of the gateway's. Anyone who may submit can
// have outcomes stored under a gateway task's id (a forged message, a task
// submitted again after the duplicate window); only the submission's own
// outcome answers the caller, calls its pingback and frees its slot.
func (g *Gateway) record(o stream.Outcome, gen uint64) {
	g.mu.Lock()
	e := g.tasks[o.ID]
	switch {
	case e == nil || e.done:
	case e.gen == 0:
		// Submit has not returned the generation yet: keep it until it
		// does (gotGen).
		if len(e.early) < maxEarly {
			e.early = append(e.early, genOutcome{o, gen})
		} else {
			e.overflow = true
		}
	case gen == e.gen:
		g.finishLocked(e, o)
	}
	g.mu.Unlock()
}

// finishLocked ends entry e with its outcome o: the answer of its polls,
// its slot freed, its pingback sent. Callers hold g.mu.
func (g *Gateway) finishLocked(e *entry, o stream.Outcome) {
	now := g.cfg.Now()
	e.done, e.doneAt, e.out, e.early = true, now, o, nil
	e.caller.inFlight--
	if e.callback.url != "" {
		g.pingwait.Add(1)
		a := g.answerOf(o, e.method, now)
		var body []byte
		if e.callback.json {
			a.created, a.from = e.sent, e.from
			id, _ := strconv.ParseInt(e.num, 10, 64)
			body, _ = json.Marshal(taskResult(e.caller.Client, createtask.TaskID(id), a))
		}
		go g.sendPingback(e.num, e.callback, a, body)
	}
}

// gotGen records the generation Submit gave entry e (task id) and ends it
// with an outcome of that generation that came first. When more outcomes
// came under the id than the entry keeps, its own is read from the stream.
func (g *Gateway) gotGen(e *entry, id string, gen uint64, deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.gen, e.deadline = gen, deadline
	for _, eo := range e.early {
		if eo.gen == gen {
			g.finishLocked(e, eo.out)
			return
		}
	}
	e.early = nil
	if !e.overflow || g.ctx.Err() != nil {
		return
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithDeadline(g.ctx, deadline.Add(time.Minute))
		defer cancel()
		o, err := e.caller.client.WaitReceipt(ctx, stream.Receipt{ID: id, Seq: gen})
		if err != nil && o.ID == "" {
			return // the sweep forgets it past its deadline; polls read the stream
		}
		g.record(o, gen)
	}()
}

// sweep forgets finished tasks after keepDone, drops tokens from memory at
// their expiry, and forgets unfinished tasks a minute past their deadline
// (no worker took them, or their outcome was lost): they stop counting
// against the key's share, and polls read them from the stream.
func (g *Gateway) sweep() {
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, e := range g.tasks {
		if !e.done {
			if !e.deadline.IsZero() && now.Sub(e.deadline) > time.Minute {
				delete(g.tasks, id)
				g.past[id] = pastTask{gen: e.gen, at: now}
				e.caller.inFlight--
			}
			continue
		}
		if now.Sub(e.doneAt) > keepDone {
			delete(g.tasks, id)
			g.past[id] = pastTask{gen: e.gen, at: now}
			continue
		}
		if e.out.Solution != nil && !now.Before(e.out.ExpiresAt) {
			e.out.Solution, e.out.UserAgent = nil, ""
		}
	}
	keep := cmp.Or(g.cfg.Topology.Retention, stream.DefaultRetention)
	for id, p := range g.past {
		if now.Sub(p.at) > keep || len(g.past) > maxPast {
			delete(g.past, id)
		}
	}
}

// maxPast bounds the forgotten tasks whose generations the gateway keeps
// (about 150 bytes each): over it, some are dropped, and answer like tasks
// submitted before a restart.
const maxPast = 1 << 20

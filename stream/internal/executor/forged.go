// Forged task messages: what the pool spends on messages that are not a
// submission of their id (their envelope does not hold together).

package executor

import (
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/captchaq/captchaq/stream/wire"
)

// KindForged is the kind of the observation (Executor.Observe) made when a
// forged task message ends, recorded or not. It is never recorded as an
// event.
const KindForged wire.EventKind = "forged"

// The forged-record budget. Anyone with the producer role may publish any
// number of messages under any id, and every record of an id is written by
// compare-and-set on the same subjects: one record per forged copy would
// serialise the pool on them and, under one id, keep the real task's own
// records from ever winning the race. So a worker records only a few
// forged copies, and ends the rest with an ack and nothing written.
const (
	// ForgedPerIDBurst forged copies of one id are recorded at once, then
	// one more every ForgedPerIDEvery: a flood under one id writes at most
	// that under the id, so the real task's writes lose a race at most
	// that often.
	ForgedPerIDBurst = 3
	ForgedPerIDEvery = 10 * time.Second
	// ForgedBurst forged copies are recorded by a worker at once, whatever
	// their ids, then one more every ForgedEvery: a flood over many ids
	// costs the pool one ack a copy beyond that.
	ForgedBurst = 50
	ForgedEvery = 100 * time.Millisecond
	// forgedIDs bounds the ids the budget remembers: when it is reached,
	// the ids whose budget is whole again are forgotten (with the count of
	// their copies ended since their last record, which their warning and
	// the observations keep), and while it is still reached the copies of
	// other ids end without a record.
	forgedIDs = 4096
)

// ForgedBudget decides which forged task messages a worker records (the
// verdict, the dead letter and the outcome INVALID_ENVELOPE under the id,
// as for any invalid task) and which it ends without a record, counting
// them: the next recorded copy of the id says how many were ended since,
// and each one is observed (KindForged). Its zero value is ready; it is
// safe for concurrent use.
type ForgedBudget struct {
	mu     sync.Mutex
	ids    map[string]*forgedID
	all    bucket
	warned time.Time // the last warning that the budget remembers no more ids
}

// forgedID is what the budget remembers of one id.
type forgedID struct {
	b bucket
	// ended counts the copies ended without a record since the last
	// recorded one (since then), warned whether that was logged.
	ended  int
	since  time.Time
	warned bool
}

// bucket is a token bucket; its zero value is full.
type bucket struct {
	spent float64 // tokens spent, as of at
	at    time.Time
}

// take spends a token of a bucket of burst tokens that gains one every
// every, if one is left at now.
func (b *bucket) take(now time.Time, burst int, every time.Duration) bool {
	b.refill(now, every)
	if b.spent+1 > float64(burst) {
		return false
	}
	b.spent++
	return true
}

func (b *bucket) refill(now time.Time, every time.Duration) {
	if !b.at.IsZero() && now.After(b.at) {
		b.spent = max(0, b.spent-float64(now.Sub(b.at))/float64(every))
	}
	b.at = now
}

// full reports whether the bucket has every token back at now.
func (b *bucket) full(now time.Time, every time.Duration) bool {
	b.refill(now, every)
	return b.spent == 0
}

// forgedDecision is what the budget decided for one forged copy.
type forgedDecision struct {
	record bool
	// ended is, for a copy to record, how many copies of the id were ended
	// without a record since; for one ended, how many so far, this one
	// included.
	ended int
	since time.Time
	// warn says this is the first copy of the id ended without a record
	// since its last recorded one: the worker says so once.
	warn bool
}

// decide spends the budget for one forged copy of id at now.
func (f *ForgedBudget) decide(id string, now time.Time) forgedDecision {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.ids == nil {
		f.ids = map[string]*forgedID{}
	}
	e := f.ids[id]
	if e == nil {
		if len(f.ids) >= forgedIDs {
			for k, o := range f.ids {
				if o.b.full(now, ForgedPerIDEvery) {
					delete(f.ids, k)
				}
			}
		}
		if len(f.ids) >= forgedIDs {
			// Too many ids at once to remember: end it unrecorded, and
			// say so every ForgedPerIDEvery at most.
			warn := now.Sub(f.warned) >= ForgedPerIDEvery
			if warn {
				f.warned = now
			}
			return forgedDecision{ended: 1, since: now, warn: warn}
		}
		e = &forgedID{}
		f.ids[id] = e
	}
	// The id's token is taken back if the worker's budget has none.
	if e.b.take(now, ForgedPerIDBurst, ForgedPerIDEvery) {
		if f.all.take(now, ForgedBurst, ForgedEvery) {
			d := forgedDecision{record: true, ended: e.ended, since: e.since}
			e.ended, e.since, e.warned = 0, time.Time{}, false
			return d
		}
		e.b.spent--
	}
	if e.ended == 0 {
		e.since = now
	}
	e.ended++
	d := forgedDecision{ended: e.ended, since: e.since, warn: !e.warned}
	e.warned = true
	return d
}

// forgedOpen decides, once open has found the delivery forged, whether it
// is recorded. A recorded copy's reason names the copies of its id ended
// since the last one; for the others it reports false, and the delivery
// ends with endForged.
func (d *delivery) forgedOpen() (record bool) {
	if d.x.Forged == nil {
		return true
	}
	dec := d.x.Forged.decide(d.id, time.Now())
	if dec.record {
		if dec.ended > 0 {
			d.invalid = fmt.Errorf("%w; %d more forged messages under this id ended without a record since %s",
				d.invalid, dec.ended, dec.since.UTC().Format(time.RFC3339))
		}
		return true
	}
	if dec.warn {
		d.log.Warn("forged task messages under this id: ending them without a record until the next is recorded",
			slog.Any("error", d.invalid), slog.Int("ended", dec.ended))
	} else {
		d.log.Debug("forged task message ended without a record", slog.Any("error", d.invalid))
	}
	return false
}

// endForged ends a forged copy without a record: the ack removes (and
// erases) the message, which is not a submission of its id; the
// observation counts it.
func (d *delivery) endForged() {
	d.done()
	d.observeForged()
}

// observeForged reports the end of a forged copy to the observer.
func (d *delivery) observeForged() {
	d.x.Observe(wire.Event{Kind: KindForged, Code: wire.CodeInvalidEnvelope, Gen: d.gen}, d.task)
}

// forgedContended ends a forged copy whose record lost its race with other
// records of the id: it does not try again (store), and ends as one ended
// without a record. What it did record stays; readers skip a generation
// whose events say INVALID_ENVELOPE.
func (d *delivery) forgedContended() {
	d.log.Info("forged task message: its record lost a race with other records of the id; ended without it")
	d.endForged()
}

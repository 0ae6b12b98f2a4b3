// Draining forged task messages in bulk, beside the worker's threads.

package dispatcher

import (
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/wire"
)

// Draining forged messages in bulk. A forged message (its headers alone
// show it is not a submission of its id) costs a worker no solve, and,
// past the forged-record budget, no write: one delivery and one ack. Taken
// one per free thread, as tasks are, each costs a fetch, and a fetch is a
// turn of the broker's stream loop, which stores every publish queued
// before it first: while a producer keeps publishing, each turn waits for
// as many stores as it keeps in flight, so that a pool taking four
// messages a turn ended a few a second while the flood went on, and a
// task queued behind 1,000 of them had no outcome in 30 s. So once a fetch
// of a feed brings a forged message, its next fetches ask for up to
// DrainBatch messages (fewer for large ones: DrainBytes per fetch), end
// the forged ones beside the threads (Dispatcher.Drain), give the threads
// the tasks among them, and hand the tasks beyond the free threads back at
// once (Nak, delivered again before anything stored after them), until a
// fetch brings no forged message.
//
// Who published a message cannot decide its share. The shipped roles give
// every producer the one user "producer", the stream drops the broker's
// Nats-Request-Info before it stores a message, and every header a task
// message carries (Captchaq-Client among them) is the publisher's to
// choose: a share per named producer would give a hostile one as many
// shares as names it makes up, or the victim's own. What a worker can
// judge without trusting the publisher is the message itself, so the pool
// spends on a forged message what ending it costs, in bulk, and nothing
// per producer.
const (
	DrainBatch = 256
	DrainBytes = 8 << 20
)

// drainNext sets how many messages the next fetch of f asks for after one
// that brought got messages of size bytes in all, drained of them forged:
// DrainBatch, or fewer to keep DrainBytes, while forged ones come; else
// one per free thread again.
func (dp *Dispatcher) drainNext(f *Feed, drained, got, size int) {
	if drained == 0 {
		f.drainWant.Store(0)
		return
	}
	each := max(1, size/got)
	f.drainWant.Store(int32(min(DrainBatch, max(1, DrainBytes/each))))
}

// Replay- and moved-shaped copies. A message whose headers hold but that
// says it is a replay of a dead letter or a copy a worker moved is forged
// or not by the task's records alone, which a read per copy tells; a
// producer may publish such copies under one id as fast as forged ones.
// Taken one per free thread, they cost what forged ones did before the
// drain (a task queued behind 1,000 of them, with the flood going on, had
// no outcome in 30 s), so the drain takes them in bulk as well: the free
// threads take them as tasks, and those past the threads are judged beside
// them (Dispatcher.Check); the few genuine ones among those, handed back,
// are not judged again when they come back (Verified).

// NeedsRecords reports whether m's headers hold but leave its being a
// submission of its id to the task's records: a moved copy, or a message
// id other than the task id (a replay's).
func NeedsRecords(m jetstream.Msg) bool {
	h := m.Headers()
	return wire.IsMovedCopy(h) || h.Get(wire.HeaderMsgID) != wire.IDFromSubject(m.Subject())
}

// maxVerified bounds how many genuine messages the dispatcher remembers
// between Check and a thread taking them: past it, it forgets them all,
// and each is judged once more.
const maxVerified = 4096

// Verified notes that Check found m genuine: when a fetch brings it again
// it goes to a thread.
func (dp *Dispatcher) Verified(m jetstream.Msg) {
	md, err := m.Metadata()
	if err != nil {
		return
	}
	dp.verifiedMu.Lock()
	defer dp.verifiedMu.Unlock()
	if dp.verified == nil || len(dp.verified) >= maxVerified {
		dp.verified = make(map[uint64]struct{})
	}
	dp.verified[md.Sequence.Stream] = struct{}{}
}

// isVerified reports whether Check found m genuine: past the free
// threads it is handed back, not judged again.
func (dp *Dispatcher) isVerified(m jetstream.Msg) bool {
	md, err := m.Metadata()
	if err != nil {
		return false
	}
	dp.verifiedMu.Lock()
	defer dp.verifiedMu.Unlock()
	_, ok := dp.verified[md.Sequence.Stream]
	return ok
}

// forgetVerified forgets m, taken by a thread.
func (dp *Dispatcher) forgetVerified(m jetstream.Msg) {
	if md, err := m.Metadata(); err == nil {
		dp.verifiedMu.Lock()
		delete(dp.verified, md.Sequence.Stream)
		dp.verifiedMu.Unlock()
	}
}

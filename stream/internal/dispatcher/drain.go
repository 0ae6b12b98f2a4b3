// Draining forged task messages in bulk, beside the worker's threads.

package dispatcher

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

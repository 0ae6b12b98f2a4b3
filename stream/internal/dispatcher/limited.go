// Fetching from a consumer held to a lane limit (MaxAckPending) without
// waiting at the limit.

package dispatcher

import (
	"context"
	"time"

	"github.com/nats-io/nats.go/jetstream"
)

// fetchLimited pulls up to want tasks from a consumer held to a lane limit
// (MaxAckPending), asking for no more than the room it has left. The server
// does not answer a no-wait fetch of a consumer at its MaxAckPending with "no
// messages": it keeps the request until a task of the lane is acked, and
// nats.go gives up only after a second of silence, all that time holding up
// the dispatch loop, high-priority tasks and the other lanes included. So it
// first asks the consumer for its room (fetchRoom). It returns how many
// tasks it asked for.
func (dp *Dispatcher) fetchLimited(ctx context.Context, f *Feed, want int) (jetstream.MessageBatch, int, error) {
	info, err := f.Cons.Info(ctx)
	if err != nil {
		return nil, 0, err
	}
	return FetchRoom(f, info, want)
}

// limitedFetchWait bounds a fetch from a lane-limited consumer that another
// worker may have filled since its room was read.
const limitedFetchWait = 50 * time.Millisecond

// FetchRoom fetches up to want tasks of a lane-limited consumer whose state
// info read a moment ago: none when it had no room (a nil batch); with tasks
// waiting, no more than there were, with an expiry of limitedFetchWait, so
// that another worker taking the room in between (both saw the last free
// slot) costs this worker 50 ms instead of the second a no-wait fetch at the
// limit waits; with none waiting, a no-wait fetch, which also brings tasks
// coming back for a retry.
//
// With no room but tasks waiting, right after this worker acked a task of
// the lane (LaneFreed), it asks for one task with the same expiry: the
// server counts an ack a moment after it arrives (its consumer takes acks
// from a queue of their own), so the info may not show the room that ack
// made yet, and nothing else would tell an idle thread of it before the
// idle check. The server holds the request until the room is there.
func FetchRoom(f *Feed, info *jetstream.ConsumerInfo, want int) (jetstream.MessageBatch, int, error) {
	room := info.Config.MaxAckPending - info.NumAckPending
	freed := f.freed.Swap(false)
	if room <= 0 && freed && info.NumPending > 0 {
		b, err := f.Cons.Fetch(1, jetstream.FetchMaxWait(limitedFetchWait))
		return b, 1, err
	}
	if room <= 0 {
		return nil, 0, nil
	}
	want = min(want, room)
	if info.NumPending > 0 {
		want = int(min(uint64(want), info.NumPending))
		b, err := f.Cons.Fetch(want, jetstream.FetchMaxWait(limitedFetchWait))
		return b, want, err
	}
	b, err := f.Cons.FetchNoWait(want)
	return b, want, err
}

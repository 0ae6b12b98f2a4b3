// The normal-priority consumers' share of a worker's fetches, and the
// order consumers are looked at in.

package dispatcher

import "github.com/captchaq/captchaq/stream/wire"

// NormalShare bounds how long high-priority tasks hold back a normal one:
// of every NormalShare fetches in a row that find a normal task may be
// waiting (its consumer has news) and take high-priority tasks, the last
// asks the normal consumers first and takes one task from them. So a
// producer that floods high priority (valid tasks or forged copies) delays
// a normal task by at most NormalShare-1 fetches of each worker, and high
// priority keeps at least three in four of the threads it contends for:
// 4 leaves high priority its purpose (it goes first three times in four,
// and alone when no normal task waits) while a normal task behind any flood
// waits at most three high-priority tasks per thread, not the flood.
// asynq's weighted queues and River's fair fetch bound priority the same
// way.
const NormalShare = 4

// settle counts a fetch that took high and normal tasks toward the normal
// consumers' share: one that took only high-priority tasks while a normal
// consumer may have a task brings the share one fetch nearer; a normal
// task taken starts the count again.
func (dp *Dispatcher) settle(high, normal int) {
	switch {
	case normal > 0:
		dp.highStreak = 0
	case high > 0 && dp.normalWaiting():
		dp.highStreak++
	}
}

// normalWaiting reports whether a normal-priority consumer may have a task
// (news since it was last found empty).
func (dp *Dispatcher) normalWaiting() bool {
	for _, f := range dp.Feeds {
		if f.Priority != wire.PriorityHigh && f.News.Load() != f.EmptyAt.Load() {
			return true
		}
	}
	return false
}

// rotated returns the consumers in the order to look at them this time: every
// lane's high-priority consumer before any normal one, and within each
// priority the lanes in turn. When the normal consumers' share is due
// (NormalShare) it reports so, and the order starts with the normal
// consumers, which come again after the high ones for the threads left.
func (dp *Dispatcher) rotated() ([]*Feed, bool) {
	k := len(wire.Lanes)
	out := make([]*Feed, 0, len(dp.Feeds)+k)
	for p := 0; p < len(dp.Feeds)/k; p++ {
		for i := range k {
			out = append(out, dp.Feeds[p*k+(i+dp.turn)%k])
		}
	}
	if dp.highStreak < NormalShare-1 || !dp.normalWaiting() {
		return out, false
	}
	var normal []*Feed
	for _, f := range out {
		if f.Priority != wire.PriorityHigh {
			normal = append(normal, f)
		}
	}
	return append(normal, out...), true
}

package jscall

import (
	"sync/atomic"
	"time"
)

// BrokerClock is a worker's reading of the broker's clock: how far it is
// ahead of WorkerConfig.Now (negative: behind), from the stamps the broker
// put on the worker's heartbeats. Token expiry is on the broker's clock, the
// one clock every producer and worker shares.
type BrokerClock struct{ offset atomic.Int64 }

// Set records the offset d.

func (c *BrokerClock) Set(d time.Duration) { c.offset.Store(int64(d)) }

// ClockOffset is the broker's clock less the worker's, from the stamp at
// the broker put on a heartbeat sent at sent and acknowledged at acked (the
// worker's clock): any offset in [at-acked, at-sent] fits what was seen,
// and the one nearest zero is taken, so clocks that agree read as agreeing
// whatever the round trip took.
func ClockOffset(at, sent, acked time.Time) time.Duration {
	lo, hi := at.Sub(acked), at.Sub(sent)
	switch {
	case lo > 0:
		return lo
	case hi < 0:
		return hi
	}
	return 0
}

// Offset is the broker's clock less the local one.
func (c *BrokerClock) Offset() time.Duration { return time.Duration(c.offset.Load()) }

// BrokerTime is t, a time of the local clock, on the broker's clock.
func (c *BrokerClock) BrokerTime(t time.Time) time.Time { return t.Add(c.Offset()) }

// LocalTime is t, a time of the broker's clock, on the local clock; the
// zero time stays zero.
func (c *BrokerClock) LocalTime(t time.Time) time.Time {
	if t.IsZero() {
		return t
	}
	return t.Add(-c.Offset())
}

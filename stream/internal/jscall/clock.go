package jscall

import (
	"sync/atomic"
	"time"
)

// BrokerClock is a worker's reading of the broker's clock: how far it is
// ahead of the local clock (negative: behind), from the stamps the broker
// put on the worker's heartbeats. Token expiry is on the broker's clock, the
// one clock every producer and worker shares.
//
// A reading holds only until the local clock is stepped (an operator or NTP
// setting it): a step between two heartbeats would otherwise move every time
// the worker stamps by the step until the next one (a token solved a moment
// after the clock was set back 10 minutes was stamped as expired 5 minutes
// before). So each reading keeps the local clock's wall time and the
// process's monotonic clock when it was taken, and when the wall clock has
// since fallen behind the monotonic one, it was set back: the offset grows by
// as much. A wall clock gone ahead of the monotonic one is left to the next
// heartbeat, because a suspended machine looks the same (its monotonic clock
// stands still while it sleeps, the wall clock does not) and its wall clock
// is right: a time stamped late only stretches what it bounds, one stamped
// early ends it (Client.brokerNow takes the later of the two for the same
// reason).
type BrokerClock struct {
	// Local is the local clock (WorkerConfig.Now, ClientConfig.Now); nil is
	// time.Now. Set before the first reading.
	Local func() time.Time
	r     atomic.Pointer[reading]
}

// reading is one measurement of the offset: the local clock's wall time and
// the monotonic clock (time.Now) when it was taken.
type reading struct {
	offset     time.Duration
	wall, mono time.Time
}

// stepNoise is the drift between the wall and the monotonic clock below
// which the wall clock counts as not set back: NTP's slewing and the moment
// between reading the two clocks stay far below it, and the next heartbeat
// measures again.
const stepNoise = 500 * time.Millisecond

// Set records the offset d, measured now.
func (c *BrokerClock) Set(d time.Duration) {
	c.r.Store(&reading{offset: d, wall: c.local().Round(0), mono: time.Now()})
}

func (c *BrokerClock) local() time.Time {
	if c.Local != nil {
		return c.Local()
	}
	return time.Now()
}

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

// Offset is the broker's clock less the local one now: the last reading,
// plus however far the local clock was set back since it was taken.
func (c *BrokerClock) Offset() time.Duration {
	r := c.r.Load()
	if r == nil {
		return 0
	}
	if back := time.Since(r.mono) - c.local().Round(0).Sub(r.wall); back > stepNoise {
		return r.offset + back
	}
	return r.offset
}

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

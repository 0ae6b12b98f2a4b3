package jscall

import (
	"sync/atomic"
	"testing"
	"time"
)

// A worker's clock set back 10 minutes after the broker's clock was read:
// the times it stamps stay on the broker's clock (before, each was 10
// minutes early until the next heartbeat, and a token solved then was
// stamped as expired before it was solved). Set forward, the stamps follow
// the local clock until the next reading (a suspended machine looks the
// same, and its clock is right), and a clock that agrees with the
// monotonic one keeps the reading as it was.
func TestBrokerTimeHoldsWhenTheLocalClockIsSetBack(t *testing.T) {
	var step atomic.Int64
	local := func() time.Time { return time.Now().Add(time.Duration(step.Load())) }
	c := BrokerClock{Local: local}
	c.Set(3 * time.Second)

	near := func(got, want time.Time) bool { d := got.Sub(want); return d > -time.Second && d < time.Second }
	if got, want := c.BrokerTime(local()), time.Now().Add(3*time.Second); !near(got, want) {
		t.Fatalf("no step: broker time %v, want %v", got, want)
	}
	step.Store(int64(-10 * time.Minute))
	if got, want := c.BrokerTime(local()), time.Now().Add(3*time.Second); !near(got, want) {
		t.Fatalf("set back 10 min: broker time %v, want %v (off by %v)", got, want, got.Sub(want))
	}
	if got, want := c.LocalTime(time.Now().Add(3*time.Second)), local(); !near(got, want) {
		t.Fatalf("set back 10 min: local time %v, want %v", got, want)
	}
	step.Store(int64(10 * time.Minute))
	if got, want := c.BrokerTime(local()), local().Add(3*time.Second); !near(got, want) {
		t.Fatalf("set forward 10 min: broker time %v, want the local clock's %v", got, want)
	}
	var zero BrokerClock
	if now := time.Now(); !zero.BrokerTime(now).Equal(now) {
		t.Fatal("a clock never read moves nothing")
	}
}

package retry

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

func exact() Policy {
	return Policy{MaxAttempts: 3, InitialInterval: time.Second, Multiplier: 2, MaxInterval: 5 * time.Second, NoJitter: true,
		CapacityDelay: 5 * time.Second, CapacityMaxDelay: 40 * time.Second}
}

func TestStart(t *testing.T) {
	t.Parallel()
	p := exact()
	cases := []struct {
		name string
		in   StartInput
		want Action
	}{
		{"fresh task", StartInput{Now: t0}, Action{Step: Proceed}},
		{"budget left", StartInput{Attempts: 2, Now: t0, Deadline: t0.Add(time.Minute)}, Action{Step: Proceed}},
		{"budget left after a crash", StartInput{Attempts: 2, LastCrashed: true, Now: t0}, Action{Step: Proceed}},
		{"deadline passed", StartInput{Now: t0, Deadline: t0}, Action{Step: DeadLetter, Reason: ReasonExpired}},
		{"deadline beats budget", StartInput{Attempts: 3, Now: t0.Add(time.Second), Deadline: t0}, Action{Step: DeadLetter, Reason: ReasonExpired}},
		{"budget spent by crashes", StartInput{Attempts: 3, LastCrashed: true, Now: t0}, Action{Step: DeadLetter, Reason: ReasonCrashed}},
		{"budget spent by failures", StartInput{Attempts: 3, Now: t0}, Action{Step: DeadLetter, Reason: ReasonAttemptsExhausted}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, p.Start(tc.in), tc.name)
	}
}

func TestEnd(t *testing.T) {
	t.Parallel()
	p := exact()
	far := t0.Add(time.Hour)
	cases := []struct {
		name string
		in   EndInput
		want Action
	}{
		{"solved", EndInput{Attempts: 1, Now: t0}, Action{Step: Done}},
		{"fatal", EndInput{Failed: true, Class: Fatal, Now: t0}, Action{Step: Stop}},
		{"permanent on first attempt", EndInput{Attempts: 1, Failed: true, Class: Permanent, Now: t0}, Action{Step: DeadLetter, Reason: ReasonPermanent}},
		{"transient 1", EndInput{Attempts: 1, Failed: true, Class: Transient, Now: t0, Deadline: far}, Action{Step: Retry, Delay: time.Second}},
		{"transient 2", EndInput{Attempts: 2, Failed: true, Class: Transient, Now: t0, Deadline: far}, Action{Step: Retry, Delay: 2 * time.Second}},
		{"resubmit", EndInput{Attempts: 1, Failed: true, Class: Resubmit, Now: t0}, Action{Step: Retry, Delay: time.Second}},
		{"unclassified is transient", EndInput{Attempts: 1, Failed: true, Class: Unknown, Now: t0}, Action{Step: Retry, Delay: time.Second}},
		{"budget spent", EndInput{Attempts: 3, Failed: true, Class: Transient, Now: t0}, Action{Step: DeadLetter, Reason: ReasonAttemptsExhausted}},
		{"retry would miss the deadline", EndInput{Attempts: 1, Failed: true, Class: Transient, Now: t0, Deadline: t0.Add(time.Second)}, Action{Step: DeadLetter, Reason: ReasonExpired}},
		{"capacity first", EndInput{Attempts: 0, Failed: true, Class: Capacity, Snoozes: 1, Now: t0}, Action{Step: Snooze, Delay: 5 * time.Second}},
		{"capacity grows", EndInput{Attempts: 0, Failed: true, Class: Capacity, Snoozes: 3, Now: t0}, Action{Step: Snooze, Delay: 20 * time.Second}},
		{"capacity caps", EndInput{Attempts: 0, Failed: true, Class: Capacity, Snoozes: 50, Now: t0}, Action{Step: Snooze, Delay: 40 * time.Second}},
		{"capacity never exhausts the budget", EndInput{Attempts: 3, Failed: true, Class: Capacity, Snoozes: 1000, Now: t0, Deadline: far}, Action{Step: Snooze, Delay: 40 * time.Second}},
		{"capacity near the deadline halves the wait", EndInput{Failed: true, Class: Capacity, Snoozes: 1, Now: t0, Deadline: t0.Add(4 * time.Second)}, Action{Step: Snooze, Delay: 2 * time.Second}},
		{"a refusal met by a thread wait comes back at once", EndInput{Failed: true, Class: Capacity, Snoozes: 1, ThreadWaited: true, Now: t0, Deadline: far}, Action{Step: Snooze}},
		{"a second refusal in a row backs off from CapacityDelay", EndInput{Failed: true, Class: Capacity, Snoozes: 2, ThreadWaited: true, Now: t0}, Action{Step: Snooze, Delay: 5 * time.Second}},
		{"a third doubles it", EndInput{Failed: true, Class: Capacity, Snoozes: 3, ThreadWaited: true, Now: t0}, Action{Step: Snooze, Delay: 10 * time.Second}},
		{"a thread wait past the deadline expires", EndInput{Failed: true, Class: Capacity, Snoozes: 1, ThreadWaited: true, Now: t0, Deadline: t0}, Action{Step: DeadLetter, Reason: ReasonExpired}},
		{"capacity at the deadline expires", EndInput{Failed: true, Class: Capacity, Snoozes: 1, Now: t0, Deadline: t0.Add(600 * time.Millisecond)}, Action{Step: DeadLetter, Reason: ReasonExpired}},
	}
	for _, tc := range cases {
		require.Equal(t, tc.want, p.End(tc.in), tc.name)
	}
}

func TestDelayGrowsToCapWithJitterInBounds(t *testing.T) {
	t.Parallel()
	p := Policy{InitialInterval: time.Second, Multiplier: 2, MaxInterval: 10 * time.Second, RandomizationFactor: 0.5}
	for n, base := range map[int]time.Duration{1: time.Second, 2: 2 * time.Second, 3: 4 * time.Second, 4: 8 * time.Second, 5: 10 * time.Second, 40: 10 * time.Second} {
		for range 50 {
			d := p.Delay(n)
			require.GreaterOrEqual(t, d, base/2, "attempt %d", n)
			require.LessOrEqual(t, d, base*3/2, "attempt %d", n)
		}
	}
}

func TestZeroPolicyHasDocumentedDefaults(t *testing.T) {
	t.Parallel()
	p := Policy{}.WithDefaults()
	require.Equal(t, DefaultMaxAttempts, p.MaxAttempts)
	require.Equal(t, DefaultInitialInterval, p.InitialInterval)
	require.Equal(t, DefaultRandomization, p.RandomizationFactor)
	// backoff/v4 would return Stop (-1) after 15 minutes by default; ours never does.
	require.Positive(t, Policy{NoJitter: true}.Delay(1000))
}

func TestNamesRoundTrip(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for c := Unknown; c <= Fatal; c++ {
		require.False(t, seen[c.String()], "class names are distinct: %s", c)
		seen[c.String()] = true
	}
	require.Equal(t, "unknown", Class(99).String())
	for _, r := range Reasons {
		require.True(t, r.Valid())
	}
	require.False(t, Reason("bored").Valid())
	require.Equal(t, "dead-letter", DeadLetter.String())
}

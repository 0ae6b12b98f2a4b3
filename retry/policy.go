package retry

import (
	"fmt"
	"time"

	"github.com/cenkalti/backoff/v4"
)

// Policy is the retry policy of a worker pool. The zero value is usable: every
// zero field takes the default written beside it.
//
// Retry delay after the n-th failed attempt (n ≥ 1), computed by
// cenkalti/backoff/v4's ExponentialBackOff with MaxElapsedTime = 0 (it never
// gives up on its own; the attempt budget and the task deadline do):
//
//	base(n)  = min(InitialInterval × Multiplier^(n-1), MaxInterval)
//	delay(n) = base(n) × (1 ± RandomizationFactor), uniformly random
//
// Capacity errors (no free thread at the service) do not spend attempts. The
// k-th consecutive snooze waits min(CapacityDelay × 2^(k-1), CapacityMaxDelay),
// without jitter, for as long as the task's deadline allows. A refusal of
// the full plan that the solver met by waiting for a thread to free
// (EndInput.ThreadWaited) snoozes 0 the first time in a row and
// min(CapacityDelay × 2^(k-2), CapacityMaxDelay) the k-th (End).
type Policy struct {
	// MaxAttempts is the attempt budget per task. Default 3.
	MaxAttempts int
	// InitialInterval is the delay after the first failed attempt. Default 2s.
	InitialInterval time.Duration
	// Multiplier grows the delay per attempt. Default 2.
	Multiplier float64
	// MaxInterval caps one delay. Default 1m.
	MaxInterval time.Duration
	// RandomizationFactor is the jitter, a fraction of the delay. Default 0.25;
	// set NoJitter for exact delays.
	RandomizationFactor float64
	// NoJitter turns the jitter off (tests, benchmarks).
	NoJitter bool
	// CapacityDelay is the first snooze after a capacity error. Default 5s.
	CapacityDelay time.Duration
	// CapacityMaxDelay caps the snooze while capacity errors last. Default 1m.
	CapacityMaxDelay time.Duration
}

// Defaults of Policy's zero fields, applied by WithDefaults.
const (
	// DefaultMaxAttempts is the default Policy.MaxAttempts.
	DefaultMaxAttempts = 3
	// DefaultInitialInterval is the default Policy.InitialInterval.
	DefaultInitialInterval = 2 * time.Second
	// DefaultMultiplier is the default Policy.Multiplier.
	DefaultMultiplier = 2.0
	// DefaultMaxInterval is the default Policy.MaxInterval.
	DefaultMaxInterval = time.Minute
	// DefaultRandomization is the default Policy.RandomizationFactor.
	DefaultRandomization = 0.25
	// DefaultCapacityDelay is the default Policy.CapacityDelay.
	DefaultCapacityDelay = 5 * time.Second
	// DefaultCapacityMaxDelay is the default Policy.CapacityMaxDelay.
	DefaultCapacityMaxDelay = time.Minute
)

// Validate reports the first field of p that is out of range, by name. Zero
// fields are fine: they take their defaults. Nothing is ever silently
// replaced: a negative interval, a multiplier below 1, a jitter of 1 or more,
// or a cap below its start is an error.
func (p Policy) Validate() error {
	switch {
	case p.MaxAttempts < 0:
		return fmt.Errorf("retry policy: MaxAttempts %d: want 0 (default %d) or more", p.MaxAttempts, DefaultMaxAttempts)
	case p.InitialInterval < 0:
		return fmt.Errorf("retry policy: InitialInterval %s: want 0 (default %s) or more", p.InitialInterval, DefaultInitialInterval)
	case p.Multiplier != 0 && p.Multiplier < 1:
		return fmt.Errorf("retry policy: Multiplier %g: want 0 (default %g) or at least 1", p.Multiplier, DefaultMultiplier)
	case p.MaxInterval < 0:
		return fmt.Errorf("retry policy: MaxInterval %s: want 0 (default %s) or more", p.MaxInterval, DefaultMaxInterval)
	case p.MaxInterval > 0 && p.MaxInterval < p.InitialInterval:
		return fmt.Errorf("retry policy: MaxInterval %s is below InitialInterval %s", p.MaxInterval, p.InitialInterval)
	case p.RandomizationFactor < 0 || p.RandomizationFactor >= 1:
		return fmt.Errorf("retry policy: RandomizationFactor %g: want 0 (default %g) up to, not including, 1", p.RandomizationFactor, DefaultRandomization)
	case p.CapacityDelay < 0:
		return fmt.Errorf("retry policy: CapacityDelay %s: want 0 (default %s) or more", p.CapacityDelay, DefaultCapacityDelay)
	case p.CapacityMaxDelay < 0:
		return fmt.Errorf("retry policy: CapacityMaxDelay %s: want 0 (default %s) or more", p.CapacityMaxDelay, DefaultCapacityMaxDelay)
	case p.CapacityMaxDelay > 0 && p.CapacityMaxDelay < p.CapacityDelay:
		return fmt.Errorf("retry policy: CapacityMaxDelay %s is below CapacityDelay %s", p.CapacityMaxDelay, p.CapacityDelay)
	}
	return nil
}

// WithDefaults returns p with every zero field set to its default (a policy
// that fails Validate is brought into range the same way, for callers that
// did not validate it).
func (p Policy) WithDefaults() Policy {
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = DefaultMaxAttempts
	}
	if p.InitialInterval <= 0 {
		p.InitialInterval = DefaultInitialInterval
	}
	if p.Multiplier < 1 {
		p.Multiplier = DefaultMultiplier
	}
	if p.MaxInterval <= 0 {
		p.MaxInterval = DefaultMaxInterval
	}
	if p.MaxInterval < p.InitialInterval {
		p.MaxInterval = p.InitialInterval
	}
	switch {
	case p.NoJitter:
		p.RandomizationFactor = 0
	case p.RandomizationFactor <= 0 || p.RandomizationFactor >= 1:
		p.RandomizationFactor = DefaultRandomization
	}
	if p.CapacityDelay <= 0 {
		p.CapacityDelay = DefaultCapacityDelay
	}
	if p.CapacityMaxDelay <= 0 {
		p.CapacityMaxDelay = DefaultCapacityMaxDelay
	}
	if p.CapacityMaxDelay < p.CapacityDelay {
		p.CapacityMaxDelay = p.CapacityDelay
	}
	return p
}

// Delay is the wait before the next attempt after failedAttempts failed ones
// (smaller counts as 1; see the formula on Policy). It is safe for concurrent
// use and depends only on p and failedAttempts, apart from the jitter.
func (p Policy) Delay(failedAttempts int) time.Duration {
	p = p.WithDefaults()
	if failedAttempts < 1 {
		failedAttempts = 1
	}
	b := &backoff.ExponentialBackOff{
		InitialInterval:     p.InitialInterval,
		RandomizationFactor: p.RandomizationFactor,
		Multiplier:          p.Multiplier,
		MaxInterval:         p.MaxInterval,
		MaxElapsedTime:      0, // never backoff.Stop: the budget and the deadline decide
		Stop:                backoff.Stop,
		Clock:               backoff.SystemClock,
	}
	b.Reset()
	var d time.Duration
	for range failedAttempts {
		d = b.NextBackOff()
	}
	return d
}

// SnoozeDelay is the wait after the k-th consecutive capacity error (k ≥ 1;
// smaller k count as 1): min(CapacityDelay × 2^(k-1), CapacityMaxDelay), with
// no jitter.
func (p Policy) SnoozeDelay(k int) time.Duration {
	p = p.WithDefaults()
	d := p.CapacityDelay
	for i := 1; i < k && d < p.CapacityMaxDelay; i++ {
		d *= 2
	}
	return min(d, p.CapacityMaxDelay)
}

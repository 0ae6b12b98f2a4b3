package solver

import (
	"errors"
	"math"
	"slices"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// Timing says when the client polls res.php and when it gives up. The zero
// value is the production timing (the catalogue's waits: first poll after
// 5–20 s by kind, then every 5 s); tests set Scale. Polls are
// planned from the submission; a captcha that falls behind its plan (a slow
// call) polls once at once and then keeps the plan's spacing, so it gives
// up at MaxWait (CodeTimeout) rather than send the polls it missed in a
// burst.
type Timing struct {
	// FirstPoll is the delay from submission to the first res.php call, by
	// Kind. Missing kinds use DefaultFirstPoll. With adaptive polling it is
	// used until the client has learned the kind's solve times.
	FirstPoll map[string]time.Duration
	// PollInterval is the delay between later res.php calls of the fixed
	// schedule. Zero means 5 s.
	PollInterval time.Duration
	// MaxWait is how long after submission the client gives up locally
	// (CodeTimeout), by Kind. Missing kinds use DefaultMaxWait, the
	// catalogue's.
	MaxWait map[string]time.Duration
	// MaxCalls caps the res.php calls per captcha (CodePollLimit). Zero means
	// 20.
	MaxCalls int
	// Fixed turns adaptive polling off: always FirstPoll, then every
	// PollInterval.
	Fixed bool
	// Resolution is the shortest gap between two polls the adaptive schedule
	// plans. Zero means PollInterval / 5 (1 s).
	Resolution time.Duration
	// NoBatch turns batch polling off: every res.php call asks about one
	// captcha (see batch.go). Batch polling spends no more calls than single
	// polling and finds answers sooner when several captchas are in flight.
	NoBatch bool
	// BatchGap is the least time between two batch res.php calls of a
	// Client. Zero means PollInterval / 5 (1 s).
	BatchGap time.Duration
	// PollPace is how many times the service's recommended res.php pace,
	// a poll every PollInterval per captcha in flight, a Client's calls may
	// come to when the hand-back asks captchas to poll early (ready.go).
	// Zero means the service's own (Service: 3 on CaptchaAI, 1 on
	// 2captcha); the planned polls are never held back, so a value below
	// what they spend turns the early polls off. Negative is an error.
	PollPace float64
	// Scale, when positive, multiplies every duration above after the
	// defaults are applied: 0.001 turns the 15-s first poll of reCAPTCHA into
	// 15 ms. Zero means 1.
	Scale float64
}

// DefaultFirstPoll is the first-poll delay of a Kind when Timing.FirstPoll
// does not say: the catalogue's (captcha.FirstPoll), 5 s for a kind it does
// not know.
func DefaultFirstPoll(kind string) time.Duration { return captcha.FirstPoll(kind) }

// DefaultMaxWait is the local deadline of a Kind when Timing.MaxWait does not
// say: the catalogue's (captcha.MaxWait), 120 s for a kind it does not know.
func DefaultMaxWait(kind string) time.Duration { return captcha.MaxWait(kind) }

// Defaults of Timing's zero fields.
const (
	// DefaultPollInterval is the default Timing.PollInterval.
	DefaultPollInterval = 5 * time.Second
	// DefaultMaxCalls is the default Timing.MaxCalls.
	DefaultMaxCalls = 20
)

// CheckPollPace says what is wrong with a Timing.PollPace, nil when
// nothing: it is 0 (the service's) or a finite positive multiple.
func CheckPollPace(p float64) error {
	if p < 0 || math.IsNaN(p) || math.IsInf(p, 0) {
		return errors.New("want 0 (the service's own) or a positive multiple of its recommended pace")
	}
	return nil
}

// batchGap is BatchGap resolved: its default and Scale applied.
func (t Timing) batchGap() time.Duration {
	g := t.BatchGap
	if g <= 0 {
		g = t.PollInterval
		if g <= 0 {
			g = DefaultPollInterval
		}
		g /= 5
	}
	if s := t.Scale; s > 0 && s != 1 {
		g = max(time.Duration(float64(g)*s), time.Microsecond)
	}
	return g
}

// kindTiming is Timing resolved for one kind, defaults and Scale applied.
type kindTiming struct {
	first, interval, maxWait, resolution time.Duration
	maxCalls                             int
	fixed                                bool
}

func (t Timing) forKind(kind string) kindTiming {
	k := kindTiming{
		first:      t.FirstPoll[kind],
		interval:   t.PollInterval,
		maxWait:    t.MaxWait[kind],
		resolution: t.Resolution,
		maxCalls:   t.MaxCalls,
		fixed:      t.Fixed,
	}
	if k.first <= 0 {
		k.first = DefaultFirstPoll(kind)
	}
	if k.interval <= 0 {
		k.interval = DefaultPollInterval
	}
	if k.maxWait <= 0 {
		k.maxWait = DefaultMaxWait(kind)
	}
	if k.resolution <= 0 {
		k.resolution = k.interval / 5
	}
	if k.maxCalls <= 0 {
		k.maxCalls = DefaultMaxCalls
	}
	if s := t.Scale; s > 0 && s != 1 {
		scale := func(d time.Duration) time.Duration { return max(time.Duration(float64(d)*s), time.Microsecond) }
		k.first, k.interval, k.maxWait, k.resolution = scale(k.first), scale(k.interval), scale(k.maxWait), scale(k.resolution)
	}
	return k
}

// sched is k as the schedule's statistics read it.
func (k kindTiming) sched() schedule.Timing {
	return schedule.Timing{First: k.first, Interval: k.interval, MaxWait: k.maxWait, Resolution: k.resolution, MaxCalls: k.maxCalls}
}

// fixedSchedule is FirstPoll, then every PollInterval, up to MaxWait and
// MaxCalls: the offsets from submission of the res.php calls.
func (k kindTiming) fixedSchedule() []time.Duration {
	return k.sched().FixedSchedule()
}

// coldLadder returns fixed, the fixed schedule of a kind nobody has learned
// yet, with up to coldRungs early polls before its first: at half the first
// poll, a quarter, and so on, none earlier than a quarter of Resolution nor
// at or before notBefore, by which every answer of the kind seen so far was
// still being solved.
// The documented first polls are starting points, and a service may answer
// far sooner (images in about a second); a ladder finds such an answer
// within about its own solve time instead of at the first poll, and each
// answer it finds is bounded on both sides, which is what lets the first
// handful of answers plan the kind's schedule. The ladder costs at most
// coldRungs calls for each captcha submitted before the kind is learned,
// within MaxCalls: a schedule that would spend them all before MaxWait keeps
// its last polls for the rest of the wait (reserve).
func (k kindTiming) coldLadder(fixed []time.Duration, notBefore time.Duration) []time.Duration {
	if len(fixed) == 0 {
		return fixed
	}
	var rungs []time.Duration
	for at := fixed[0] / 2; at >= k.resolution/4 && at > notBefore && len(rungs) < coldRungs; at /= 2 {
		rungs = append(rungs, at)
	}
	slices.Reverse(rungs)
	s := append(rungs, fixed...)
	if len(s) > k.maxCalls {
		s = k.reserve(s[:k.maxCalls])
	}
	return s
}

// extend appends the fixed interval after the last planned poll, up to
// MaxWait and MaxCalls, so a captcha slower than every one seen is still
// fetched.
func (k kindTiming) extend(s []time.Duration) []time.Duration {
	return k.sched().Extend(s)
}

// reserveCalls is how many of MaxCalls a plan that would spend them all
// before MaxWait keeps for the rest of the wait.
const reserveCalls = 3

// reserve returns s, or, when s spends MaxCalls before MaxWait, s with its
// last reserveCalls polls spread evenly up to MaxWait: however wrong the fit
// (the first answers learned from are the fastest), a slow captcha is still
// polled until the deadline instead of giving up (CodePollLimit) early.
func (k kindTiming) reserve(s []time.Duration) []time.Duration {
	if len(s) < k.maxCalls || k.maxCalls <= reserveCalls || s[len(s)-1] >= k.maxWait {
		return s
	}
	out := slices.Clone(s[:k.maxCalls-reserveCalls])
	from := out[len(out)-1]
	for i := 1; i <= reserveCalls; i++ {
		out = append(out, from+(k.maxWait-from)*time.Duration(i)/reserveCalls)
	}
	return out
}

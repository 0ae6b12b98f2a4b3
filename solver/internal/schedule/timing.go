package schedule

import "time"

// Timing is what a schedule is planned within, for one kind: its first
// poll, the interval of the fixed schedule, the longest wait, the grid's
// resolution and the most res.php calls per captcha.
type Timing struct {
	First, Interval, MaxWait, Resolution time.Duration
	MaxCalls                             int
}

// Window is an observation: the captcha became ready in (Lo, Hi] after
// submission. Lo = 0 is left-censored: ready before the first poll, by how
// much it does not say.
type Window struct{ Lo, Hi time.Duration }

// FixedSchedule is FirstPoll, then every PollInterval, up to MaxWait and
// MaxCalls: the offsets from submission of the res.php calls.
func (k Timing) FixedSchedule() []time.Duration {
	var s []time.Duration
	for at := k.First; at <= k.MaxWait && len(s) < k.MaxCalls; at += k.Interval {
		s = append(s, at)
	}
	return s
}

// Extend appends the fixed interval after the last planned poll, up to
// MaxWait and MaxCalls, so a captcha slower than every one seen is still
// fetched.
func (k Timing) Extend(s []time.Duration) []time.Duration {
	if len(s) == 0 {
		return k.FixedSchedule()
	}
	for at := s[len(s)-1] + k.Interval; at <= k.MaxWait && len(s) < k.MaxCalls; at += k.Interval {
		s = append(s, at)
	}
	if len(s) > k.MaxCalls {
		s = s[:k.MaxCalls]
	}
	return s
}

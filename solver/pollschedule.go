package solver

import "time"

// PollSchedule is the Client's learned poll schedule, for a client of
// another dialect that asks for a captcha's answer by its id (the JSON
// task dialect's getTaskResult): it learns the ready times of each kind
// from the answers it is told of (Observe) and plans each captcha's polls
// from them (Plan), exactly as a Client plans its res.php calls (see the
// package doc, *Polling*). A PollSchedule learns alone: it is one
// service's, and what it learned teaches no other. It is safe for
// concurrent use.
type PollSchedule struct {
	timing Timing
	poller poller
}

// NewPollSchedule returns a schedule of timing t (its zero value: the
// production timing, adaptive).
func NewPollSchedule(t Timing) *PollSchedule { return &PollSchedule{timing: t} }

// Plan returns the offsets from a captcha of kind's submission at which to
// ask for its answer: the catalogue's first poll and then the fixed
// interval (with a ladder of early polls) until the kind is learned, then
// the schedule planned from its learned distribution, up to MaxWait and
// MaxCalls. The slice must not be modified.
func (s *PollSchedule) Plan(kind string) []time.Duration {
	return s.poller.schedule(kind, s.timing.forKind(kind))
}

// Interval is the kind's poll interval (Timing.PollInterval, scaled): how
// often a captcha still not ready is asked about once its plan is spent.
func (s *PollSchedule) Interval(kind string) time.Duration { return s.timing.forKind(kind).interval }

// Observe records that a captcha of kind was ready in (lo, hi] after its
// submission: lo the latest offset at which the service said it was not
// ready (0: none did), hi the offset at which its answer was seen.
func (s *PollSchedule) Observe(kind string, lo, hi time.Duration) { s.poller.observe(kind, lo, hi) }

// SolveTime is how long a captcha of kind takes, at quantile q, and
// whether the schedule learned it (Client.SolveTime).
func (s *PollSchedule) SolveTime(kind string, q float64) (time.Duration, bool) {
	return solveTime(&s.poller, s.timing, kind, q)
}

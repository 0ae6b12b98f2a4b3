package wire

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// When is a moment a task names for its token: an instant (RFC 3339), or a
// duration from the task's submission ("90s", "10m"). Its JSON form is a
// string of either kind; Submit turns a duration into the instant, so a
// stored task names instants, and a worker reading a duration (a producer
// that publishes the wire form itself) counts it from the message's store
// time.
type When struct {
	// At is the instant; zero when In is set.
	At time.Time
	// In is the duration from submission; zero when At is set.
	In time.Duration
}

// At is the When of an instant.
func At(t time.Time) When { return When{At: t} }

// In is the When of a duration from submission.
func In(d time.Duration) When { return When{In: d} }

// IsZero reports whether w names no moment.
func (w When) IsZero() bool { return w.At.IsZero() && w.In == 0 }

// From is the instant w names for a task submitted at submitted: At, or
// submitted plus In; zero when w is.
func (w When) From(submitted time.Time) time.Time {
	if !w.At.IsZero() {
		return w.At
	}
	if w.In != 0 {
		return submitted.Add(w.In)
	}
	return time.Time{}
}

// String is the JSON form's text: RFC 3339 with fractional seconds, or the
// duration; "" when zero.
func (w When) String() string {
	switch {
	case !w.At.IsZero():
		return w.At.Format(time.RFC3339Nano)
	case w.In != 0:
		return w.In.String()
	}
	return ""
}

// MarshalJSON writes the instant or the duration as a JSON string.
func (w When) MarshalJSON() ([]byte, error) { return json.Marshal(w.String()) }

// UnmarshalJSON reads a JSON string holding an RFC 3339 instant or a
// positive duration (ParseWhen).
func (w *When) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return errors.New("want a string: an RFC 3339 instant or a duration such as 90s")
	}
	v, err := ParseWhen(s)
	if err != nil {
		return err
	}
	*w = v
	return nil
}

// ParseWhen reads an RFC 3339 instant ("2026-12-02T01:30:00Z") or a positive
// duration from submission ("90s", "1m30s"), the forms of use_at and
// not_before, for the JSON form and for the CLI's flags alike.
func ParseWhen(s string) (When, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return When{}, errors.New("empty: want an RFC 3339 instant or a duration such as 90s")
	}
	if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
		if t.IsZero() {
			// When's zero value means no moment: this one is long passed.
			return When{}, fmt.Errorf("%q: long passed", s)
		}
		return When{At: t}, nil
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		return When{}, fmt.Errorf("%q: want an RFC 3339 instant (2026-01-02T15:04:05Z) or a duration such as 90s", s)
	}
	if d <= 0 {
		return When{}, fmt.Errorf("%q: a duration from submission must be positive", s)
	}
	return When{In: d}, nil
}

// PastTolerance is how far in the past a task's use_at or not_before may
// lie when it is submitted: clocks disagree by a little, and a producer
// computing "now" gets there a moment late. Further back is refused.
const PastTolerance = 30 * time.Second

// checkSchedule checks use_at and not_before of a task submitted at now, given
// its deadline (zero: the worker's default).
func (t *Task) checkSchedule(now time.Time) error {
	if t.UseAt.IsZero() && t.NotBefore.IsZero() {
		return nil
	}
	// With now zero (ValidateShape) only what holds at any submission time
	// is checked: the instants are the worker's to judge.
	useAt, notBefore := t.UseAt.From(now), t.NotBefore.From(now)
	if !now.IsZero() {
		if !t.UseAt.At.IsZero() && useAt.Before(now.Add(-PastTolerance)) {
			return fmt.Errorf("use_at %s: already passed (more than %s ago)", useAt.Format(time.RFC3339), PastTolerance)
		}
		if !t.NotBefore.At.IsZero() && notBefore.Before(now.Add(-PastTolerance)) {
			return fmt.Errorf("not_before %s: already passed (more than %s ago)", notBefore.Format(time.RFC3339), PastTolerance)
		}
	}
	comparable := !now.IsZero() || (t.UseAt.In != 0) == (t.NotBefore.In != 0)
	if !t.UseAt.IsZero() && !t.NotBefore.IsZero() && comparable {
		if notBefore.After(useAt) {
			return fmt.Errorf("not_before %s: after use_at %s", t.NotBefore, t.UseAt)
		}
	}
	if !t.Deadline.IsZero() && !now.IsZero() {
		if !t.UseAt.IsZero() && useAt.After(t.Deadline) {
			return fmt.Errorf("use_at %s: after the deadline %s", t.UseAt, t.Deadline.Format(time.RFC3339))
		}
		if !t.NotBefore.IsZero() && !notBefore.Before(t.Deadline) {
			return fmt.Errorf("not_before %s: not before the deadline %s", t.NotBefore, t.Deadline.Format(time.RFC3339))
		}
	}
	return nil
}

// Latest is the latest of its instants (zero ones count for nothing): a
// task's default deadline counts from the latest of its submission,
// use_at and not_before, on the producer's side and the worker's alike.
func Latest(ts ...time.Time) time.Time {
	var out time.Time
	for _, t := range ts {
		if t.After(out) {
			out = t
		}
	}
	return out
}

package retry

// Class is what kind of failure an error from the solving service is. The
// solver package maps every API code to one Class; the decision logic in this
// package acts on the Class alone.
type Class int

const (
	// Unknown is the zero value: no error, or one nobody classified.
	// Policy.End treats an unclassified error as Transient.
	Unknown Class = iota
	// Poll means the answer is not ready yet (CAPCHA_NOT_READY): poll again.
	Poll
	// Capacity means the service has no free thread for us right now
	// (ERROR_NO_SLOT_AVAILABLE, CaptchaAI's ERROR_ZERO_BALANCE, MAX_USER_TURN):
	// wait and try again without spending an attempt.
	Capacity
	// Transient means a passing fault (HTTP 5xx, garbage body, network error):
	// retry with backoff; it spends an attempt.
	Transient
	// Resubmit means this captcha is lost but a new submission may succeed
	// (ERROR_CAPTCHA_UNSOLVABLE, …): retry with backoff; it spends an attempt.
	Resubmit
	// Permanent means the task itself is wrong (ERROR_PAGEURL, …): retrying
	// cannot help, so the task goes to the dead letter at once.
	Permanent
	// Fatal means the whole worker cannot work (wrong API key, banned IP): stop
	// taking tasks and leave queued ones untouched.
	Fatal
)

var classNames = [...]string{"unknown", "poll", "capacity", "transient", "resubmit", "permanent", "fatal"}

// String returns the lower-case name used in logs, headers and metrics.
func (c Class) String() string {
	if c < 0 || int(c) >= len(classNames) {
		return "unknown"
	}
	return classNames[c]
}

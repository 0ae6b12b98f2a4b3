package retry

// Reason says why a task went to the dead letter. The values are part of the
// wire contract: they appear in dead-letter headers, outcomes and filters.
type Reason string

const (
	// Permanent: the service rejected the task itself (bad page URL, site key…).
	ReasonPermanent Reason = "permanent"
	// AttemptsExhausted: every attempt of the budget failed.
	ReasonAttemptsExhausted Reason = "attempts-exhausted"
	// InvalidTask: the message on the task subject is not a valid task.
	ReasonInvalidTask Reason = "invalid-task"
	// Expired: the task's deadline passed before it could be solved.
	ReasonExpired Reason = "expired"
	// Crashed: the workers holding the task died on every attempt of the budget.
	ReasonCrashed Reason = "crashed"
)

// Reasons lists every Reason, for validating filters.
var Reasons = []Reason{ReasonPermanent, ReasonAttemptsExhausted, ReasonInvalidTask, ReasonExpired, ReasonCrashed}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool {
	for _, x := range Reasons {
		if r == x {
			return true
		}
	}
	return false
}

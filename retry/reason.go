package retry

// Reason says why a task went to the dead letter. The values are part of the
// wire contract: they appear in dead-letter headers, outcomes and filters.
type Reason string

const (
	// ReasonPermanent means the service rejected the task itself (bad page URL,
	// site key…), so no attempt could succeed.
	ReasonPermanent Reason = "permanent"
	// ReasonAttemptsExhausted means every attempt of the budget failed.
	ReasonAttemptsExhausted Reason = "attempts-exhausted"
	// ReasonInvalidTask means the message on the task subject is not a valid
	// task (bad JSON, ID, method or parameters).
	ReasonInvalidTask Reason = "invalid-task"
	// ReasonExpired means the task's deadline passed before it could be solved.
	ReasonExpired Reason = "expired"
	// ReasonCrashed means the workers holding the task died (or lost their
	// connection) on every attempt of the budget.
	ReasonCrashed Reason = "crashed"
	// ReasonCanceled means someone asked that the task not be solved
	// (captchaq task cancel, or an interrupted captchaq solve) before a
	// worker started on it.
	ReasonCanceled Reason = "canceled"
)

// Reasons lists every Reason, in no meaningful order, for validating filters
// and listing choices. Callers must not modify it.
var Reasons = []Reason{ReasonPermanent, ReasonAttemptsExhausted, ReasonInvalidTask, ReasonExpired, ReasonCrashed, ReasonCanceled}

// Valid reports whether r is one of Reasons.
func (r Reason) Valid() bool {
	for _, x := range Reasons {
		if r == x {
			return true
		}
	}
	return false
}

package wire

// The outcome codes: the codes the queue itself gives a step or a dead task
// (Event.Code, Outcome.Error, a dead letter's code) for what the service
// never answers. They stand beside the service's own codes (ERROR_PAGEURL,
// ERROR_CAPTCHA_UNSOLVABLE, …) and the solver's pseudo-codes (LOCAL_TIMEOUT,
// BAD_REPLY, …) in the same fields, so each is spelled here once and read by
// name wherever it is written or matched. They are part of the wire
// contract: their spelling never changes.
const (
	// CodeInvalidTask is the code of a task the worker found invalid (an
	// unknown method, a missing or bad parameter): it ends dead with reason
	// invalid-task and no attempt.
	CodeInvalidTask = "INVALID_TASK"
	// CodeInvalidEnvelope is the code of a task message whose envelope does
	// not hold together (CheckEnvelope): it ends dead with reason
	// invalid-task, and Wait(id) does not take it for a submission of its id.
	CodeInvalidEnvelope = "INVALID_ENVELOPE"
	// CodeDeadlinePassed is the code of a task whose deadline passed before
	// it was solved: it ends dead with reason expired.
	CodeDeadlinePassed = "DEADLINE_PASSED"
	// CodeWorkerLost is the failure a new attempt records for the attempt
	// before it, which died with its worker.
	CodeWorkerLost = "WORKER_LOST"
	// CodeCanceled is the code of a canceled generation: it ends dead with
	// reason canceled.
	CodeCanceled = "CANCELED"
	// CodeShutdown is the code of a hand-back by a stopping worker: the
	// attempt is not spent.
	CodeShutdown = "SHUTDOWN"
	// CodeSubmitByPassed is the code of a task message the stream stored
	// after its producer's submit-by instant (HeaderSubmitBy): it ends dead
	// with reason expired and no attempt, so the service is never paid for a
	// task whose producer was told the submission failed.
	CodeSubmitByPassed = "SUBMIT_BY_PASSED"
	// CodeTokenTooLarge is the code of a task whose answer was paid for but
	// is too large for the token stream: it ends dead (reason permanent)
	// instead of being solved again.
	CodeTokenTooLarge = "TOKEN_TOO_LARGE"
	// CodeBudgetExceeded is the code of a task that no provider could take
	// within the daily budgets of its producer and of the providers that
	// solve its method (package solver/provider): it ends dead with reason
	// permanent, before anything is paid for it.
	CodeBudgetExceeded = "BUDGET_EXCEEDED"
	// CodeError is the code of a failed attempt whose error carries no code
	// of its own.
	CodeError = "ERROR"
)

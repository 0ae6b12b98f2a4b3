package wire

import (
	"encoding/json"
	"time"
)

// Status is how a task ended.
type Status string

const (
	// StatusSolved means the task was solved: the outcome carries the
	// solution until the token expires.
	StatusSolved Status = "solved"
	// StatusDead means the task is in the dead letter; the outcome's Reason
	// and Error say why.
	StatusDead Status = "dead"
)

// Outcome is how a task ended, as it is stored on captcha.results.<id>, Wait
// returns it and `captchaq results` prints it. It is part of the wire
// contract: fields may be added; these keep their names and meaning.
type Outcome struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Status is StatusSolved or StatusDead.
	Status Status `json:"status"`
	// Solution is the answer: a JSON string for tokens and text, an object
	// for GeeTest ({challenge, validate, seccode}). Empty when the task is
	// dead, and when the token has expired (Wait then returns
	// ErrTokenExpired). The outcome message on captcha.results.<id> never
	// carries it: the token stream does, while the token lives.
	Solution json.RawMessage `json:"solution,omitempty"`
	// UserAgent is the user agent the token is bound to, when the service
	// names one (Turnstile; cloudflare_challenge, whose cookie is useless
	// without it); empty otherwise, and whenever Solution is.
	UserAgent string `json:"useragent,omitempty"`
	// Error is the code of a dead task's last failure: the API's code or a
	// pseudo-code (ERROR_PAGEURL, LOCAL_TIMEOUT, DEADLINE_PASSED,
	// INVALID_TASK, WORKER_LOST, …). Empty when solved.
	Error string `json:"error,omitempty"`
	// Reason is why the task is dead, a retry.Reason (permanent,
	// attempts-exhausted, invalid-task, expired, crashed); empty when solved.
	Reason string `json:"reason,omitempty"`
	// Detail says more about Error, in words, when known: the service's own
	// description of its code (its error_text), what failed on the way
	// ("read: connection reset by peer"), what is wrong with an invalid task
	// ("params.sitekey: required for method turnstile"), or why it was
	// canceled. Never a key, a token or a page URL's path.
	Detail string `json:"detail,omitempty"`
	// Attempts is how many solving attempts were spent on this submission
	// (capacity snoozes spend none), the successful one included.
	Attempts int `json:"attempts"`
	// SolveSeconds is the wall time of the successful attempt, from its start
	// to the answer, in seconds with millisecond precision; 0 when dead.
	SolveSeconds float64 `json:"solve_seconds,omitempty"`
	// ExpiresAt is when the token stops being usable (the solve's end plus
	// the method's token lifetime); the token leaves the token stream then.
	// Zero when dead.
	ExpiresAt time.Time `json:"expires_at,omitzero"`
	// Method is the task's method. It may be empty in an outcome Wait
	// rebuilds from the audit trail after the token expired.
	Method string `json:"method,omitempty"`
	// CaptchaID is the service's id of the captcha, for `captchaq report`;
	// empty when dead.
	CaptchaID string `json:"captcha_id,omitempty"`
	// Provider names the provider that solved the task, when the worker
	// solves through several (package provider); empty otherwise, and when
	// dead.
	Provider string `json:"provider,omitempty"`
	// Cost is what the solve cost at Provider, in the currency of its
	// prices, and CostBasis what the figure is: "price", the price per
	// solve the providers file states; "plan", a solve on a thread plan,
	// paid by the month whatever is solved, which costs nothing more
	// (Cost 0). Both empty without providers.
	Cost      float64 `json:"cost,omitempty"`
	CostBasis string  `json:"cost_basis,omitempty"`
	// SolvedAt is when the answer arrived, on the broker's clock as
	// ExpiresAt and UseAt are; zero when dead.
	SolvedAt time.Time `json:"solved_at,omitzero"`
	// UseAt is the task's use_at, as an instant, when it named one.
	UseAt time.Time `json:"use_at,omitzero"`
	// LifetimeAtUseS is how much of the token's lifetime was left at UseAt,
	// in seconds (ExpiresAt − UseAt; negative when the token expired
	// before it); 0 and absent without a use_at or when dead.
	LifetimeAtUseS float64 `json:"lifetime_at_use_s,omitempty"`
}

// Text returns the solution as plain text: the token or text answer itself,
// or the JSON of an object answer (GeeTest).
func (o *Outcome) Text() string {
	var s string
	if err := json.Unmarshal(o.Solution, &s); err == nil {
		return s
	}
	return string(o.Solution)
}

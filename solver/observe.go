package solver

import (
	"time"

	"github.com/captchaq/captchaq/retry"
)

// Call is one request to the service, as Config.OnCall receives it: for
// metrics and traces. It never holds the key, a token or a URL.
type Call struct {
	// Op is the endpoint: "in.php" or "res.php".
	Op string
	// Batch marks a res.php poll of several captchas (action=get&ids=…).
	Batch bool
	// Code is the answer: OK, the service's code (CAPCHA_NOT_READY,
	// ERROR_…), HTTP_<status>, BAD_REPLY or NETWORK as Error.Code has them;
	// CANCELED when the caller's context ended first.
	Code string
	// Class is Code's retry class; for OK, retry.Transient (unused).
	Class retry.Class
	// Duration is the time from sending the request to reading the reply.
	Duration time.Duration
}

// observe reports a call that started at start and ended with err (nil: OK)
// to Config.OnCall.
func (c *Client) observe(op string, batch bool, start time.Time, err error) {
	if c.onCall == nil {
		return
	}
	call := Call{Op: op, Batch: batch, Code: "OK", Duration: time.Since(start)}
	if err != nil {
		call.Code, call.Class = CodeOf(err), ClassOf(err)
		if call.Code == "" {
			call.Code = "CANCELED"
		}
	}
	c.onCall(call)
}

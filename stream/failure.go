package stream

import (
	"errors"

	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/solver"
)

// failureText says more about a failed attempt's code for the dead letter:
// the service's error_text beside its code, or for captchaq's own codes
// (NETWORK, BAD_REPLY, …) what failed. The solver's errors never hold the
// API key; the text is cut to fit an event.
func failureText(err error) string {
	var e *solver.Error
	if !errors.As(err, &e) {
		if err == nil {
			return ""
		}
		return text.Cut(err.Error(), 300)
	}
	switch {
	case e.Text != "":
		return text.Cut(e.Text, 300)
	case e.Err != nil:
		return text.Cut(e.Err.Error(), 300)
	}
	return ""
}

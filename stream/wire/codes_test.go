package wire_test

import (
	"testing"

	"github.com/captchaq/captchaq/internal/golit"
	"github.com/captchaq/captchaq/stream/wire"
)

// TestOutcomeCodesLiveHere checks that each outcome code is written once:
// no non-test Go file of the repository outside stream/wire and bench/
// holds one as a string literal; the others name the constant (the solver's
// Call.Code of a call its caller's context ended is wire.CodeCanceled too).
func TestOutcomeCodesLiveHere(t *testing.T) {
	t.Parallel()
	// CodeError is left out: "ERROR" is also how every error reply of the
	// service begins, which the solver's client reads.
	codes := []string{wire.CodeInvalidTask, wire.CodeInvalidEnvelope, wire.CodeDeadlinePassed,
		wire.CodeWorkerLost, wire.CodeCanceled, wire.CodeShutdown, wire.CodeSubmitByPassed, wire.CodeTokenTooLarge}
	found, err := golit.Files("../..", codes, "bench", "stream/wire")
	if err != nil {
		t.Fatal(err)
	}
	for code, files := range found {
		for _, f := range files {
			t.Errorf("outcome code %q is written as a literal in %s: name wire's constant", code, f)
		}
	}
}

// TestOutcomeCodeSpellings pins each outcome code's spelling: they are part
// of the wire contract (dead letters already stored, producers and the
// gateway's callers matching them), so a change of one is a break of the
// contract, not a rename.
func TestOutcomeCodeSpellings(t *testing.T) {
	t.Parallel()
	for got, want := range map[string]string{
		wire.CodeInvalidTask:     "INVALID_TASK",
		wire.CodeInvalidEnvelope: "INVALID_ENVELOPE",
		wire.CodeDeadlinePassed:  "DEADLINE_PASSED",
		wire.CodeWorkerLost:      "WORKER_LOST",
		wire.CodeCanceled:        "CANCELED",
		wire.CodeShutdown:        "SHUTDOWN",
		wire.CodeSubmitByPassed:  "SUBMIT_BY_PASSED",
		wire.CodeTokenTooLarge:   "TOKEN_TOO_LARGE",
		wire.CodeError:           "ERROR",
	} {
		if got != want {
			t.Errorf("outcome code %q, want %q: its spelling is part of the wire contract", got, want)
		}
	}
}

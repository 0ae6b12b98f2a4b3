// The captcha ids a Solve call is given: told to the caller as in.php
// answers, so that what the service accepted outlives the process that
// submitted it, and resumed from there by the next one (Request.CaptchaID).

package solver

import (
	"context"
	"time"
)

// Accepted is a captcha id the service accepted for a Solve call, or one it
// resumes polling.
type Accepted struct {
	// ID is the service's captcha id.
	ID string
	// At is when the service accepted it (for a resumed captcha, the
	// Request's Submitted).
	At time.Time
	// Resumed is set when Solve polls a captcha submitted earlier
	// (Request.CaptchaID) instead of submitting one.
	Resumed bool
	// Replaces is the captcha id this one was submitted in place of, and
	// ReplacedCode the service's word on it (ERROR_WRONG_CAPTCHA_ID,
	// ERROR_NO_SUCH_CAPCHA_ID): a resumed captcha the service no longer
	// knows. Empty for a first submission.
	Replaces, ReplacedCode string
	// Provider names the provider that accepted it, for a Solver of
	// several providers (package provider); a Client leaves it empty.
	Provider string
}

type acceptedKey struct{}

// WithAccepted returns a copy of ctx under which Client.Solve calls f with
// every captcha id it polls: as soon as in.php accepts a captcha, before the
// first poll, and when it resumes one (Request.CaptchaID). f runs on the
// goroutine that called Solve and holds up the polling while it runs, so
// that it can record the id before anything else happens; it should be
// bounded (a write with a timeout).
func WithAccepted(ctx context.Context, f func(Accepted)) context.Context {
	return context.WithValue(ctx, acceptedKey{}, f)
}

// TellAccepted tells the function WithAccepted put in ctx, if any, of a:
// for a Solver that wraps Clients (package provider) and adds to what
// they tell.
func TellAccepted(ctx context.Context, a Accepted) { accepted(ctx, a) }

// accepted tells the function WithAccepted put in ctx, if any, of a.
func accepted(ctx context.Context, a Accepted) {
	if f, _ := ctx.Value(acceptedKey{}).(func(Accepted)); f != nil {
		f(a)
	}
}

// Held is news of a captcha the service accepted and then gave no word of
// (its polls refused, timed out, answered 5xx or garbage): Since is when
// the first of those polls failed, Code what it failed with. Again, when
// set, is when the service answered about it again, ending the hold.
type Held struct {
	ID    string
	Since time.Time
	Code  string
	Again time.Time
}

type heldKey struct{}

// WithHeld returns a copy of ctx under which Client.Solve calls f when a
// captcha's polls start failing (Held.Again zero) and when the service
// answers about it again (Again set): once each per hold. f runs on the
// goroutine that called Solve and holds up the polling while it runs; it
// should be bounded.
func WithHeld(ctx context.Context, f func(Held)) context.Context {
	return context.WithValue(ctx, heldKey{}, f)
}

// held tells the function WithHeld put in ctx, if any, of h.
func held(ctx context.Context, h Held) {
	if f, _ := ctx.Value(heldKey{}).(func(Held)); f != nil {
		f(h)
	}
}

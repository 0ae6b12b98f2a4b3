// A Solve that no longer needs its caller's thread: a Solver of several
// services (package provider) says so once the captcha it polls waits at
// a service paid per solve, which no thread plan counts.

package solver

import "context"

type detachKey struct{}

// WithDetach returns a copy of ctx under which a Solver calls f (through
// Detach) once the captcha it solves waits at a service that counts
// neither the caller's threads nor a plan's: one paid per solve. The
// caller may then give the thread it holds for the Solve, and the plan
// thread, to its next task; the Solve goes on polling and returns as
// before. f is called at most once per Solve, on the goroutine that
// called Solve; it must not block. A Client never calls it.
func WithDetach(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, detachKey{}, f)
}

// Detach calls the function WithDetach put in ctx, if any.
func Detach(ctx context.Context) {
	if f, _ := ctx.Value(detachKey{}).(func()); f != nil {
		f()
	}
}

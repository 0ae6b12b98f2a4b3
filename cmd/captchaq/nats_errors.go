package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"sync"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/stream"
)

// asyncErrors keeps the last asynchronous error of a connection (permission
// violations and authorization errors arrive that way, not as the failing
// call's error) so that a call's timeout can be explained, cancels the
// contexts registered with failFast when the server refuses an operation, and
// logs connection trouble once a logger is set.
type asyncErrors struct {
	who string // "user NAME", "the user of FILE", or "no user": for messages

	mu      sync.Mutex
	last    error
	log     *slog.Logger
	next    int
	cancels map[int]context.CancelCauseFunc
	refused func(*PermissionError) // if set, sees every refusal
}

// PermissionError is a subject the server refused this connection's user.
type PermissionError struct {
	// Who names the user: "user producer", "the user of app.creds".
	Who string
	// Op is "publish" or "subscribe".
	Op string
	// Subject is the refused subject.
	Subject string
}

func (e *PermissionError) Error() string {
	msg := fmt.Sprintf("permission denied: %s may not %s to %q", e.Who, e.Op, e.Subject)
	// A client creates a stream only when it finds none: the server is not
	// captchaq's yet (or not at all), which says more than the refusal.
	if name, ok := strings.CutPrefix(e.Subject, "$JS.API.STREAM.CREATE."); ok && e.Op == "publish" {
		msg += fmt.Sprintf(": the stream %s does not exist on this server: `captchaq server` creates it as admin as it starts (or `captchaq init`, as admin)", name)
	}
	return msg
}

// Unwrap makes the error match nats.ErrPermissionViolation.
func (e *PermissionError) Unwrap() error { return nats.ErrPermissionViolation }

var permissionRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// permissionError turns the server's "Permissions Violation for Publish to
// "X"" into a *PermissionError naming the user; nil if err is no violation.
func permissionError(who string, err error) *PermissionError {
	if !errors.Is(err, nats.ErrPermissionViolation) {
		return nil
	}
	pe := &PermissionError{Who: who, Op: "publish", Subject: "?"}
	if m := permissionRe.FindStringSubmatch(err.Error()); m != nil {
		pe.Subject = m[2]
		if strings.EqualFold(m[1], "subscription") {
			pe.Op = "subscribe"
		}
	}
	return pe
}

func (a *asyncErrors) handler(_ *nats.Conn, _ *nats.Subscription, err error) {
	if pe := permissionError(a.who, err); pe != nil {
		err = pe
	}
	a.mu.Lock()
	a.last = err
	log := a.log
	var cancels []context.CancelCauseFunc
	refused := a.refused
	pe, isPerm := err.(*PermissionError)
	if isPerm {
		for _, c := range a.cancels {
			cancels = append(cancels, c)
		}
	}
	a.mu.Unlock()
	for _, c := range cancels {
		c(err)
	}
	if isPerm && refused != nil {
		refused(pe)
	}
	if log != nil {
		log.Error("NATS server refused an operation", slog.Any("error", err))
	}
}

func (a *asyncErrors) get() error {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last
}

// setLogger makes later asynchronous errors, disconnections and
// reconnections show in log.
func (a *asyncErrors) setLogger(log *slog.Logger) {
	a.mu.Lock()
	a.log = log
	a.mu.Unlock()
}

// onRefused makes f see every operation the server refuses from now on.
func (a *asyncErrors) onRefused(f func(*PermissionError)) {
	a.mu.Lock()
	a.refused = f
	a.mu.Unlock()
}

func (a *asyncErrors) logger() *slog.Logger {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.log
}

// failFast returns a context that ends as soon as the server refuses an
// operation of this connection, with the *PermissionError as its cause, so
// that a refused request fails at once rather than after its timeout.
func (a *asyncErrors) failFast(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	a.mu.Lock()
	if a.cancels == nil {
		a.cancels = map[int]context.CancelCauseFunc{}
	}
	id := a.next
	a.next++
	a.cancels[id] = cancel
	a.mu.Unlock()
	return ctx, func() {
		a.mu.Lock()
		delete(a.cancels, id)
		a.mu.Unlock()
		cancel(context.Canceled)
	}
}

// explain turns an error that would otherwise read as a bare timeout or
// cancellation into one line that says what the server refused: the
// connection's last asynchronous error (a permission violation names the
// subject and the user), or ctx's cause when failFast ended it.
func explain(err error, ae *asyncErrors) error {
	if err == nil || ae == nil {
		return err
	}
	last := ae.get()
	if last == nil || strings.Contains(err.Error(), last.Error()) || errors.Is(err, stream.ErrNoTopology) {
		// A missing topology says all there is to say: the refusal that
		// came with it is the optional question of which domain was
		// reached, which a producer or worker may not ask.
		return err
	}
	if pe, ok := last.(*PermissionError); ok {
		// The call failed because the refusal cancelled it: its own
		// "context canceled" says nothing more.
		return fmt.Errorf("%w (%s)", pe, strings.TrimSuffix(err.Error(), ": "+context.Canceled.Error()))
	}
	return fmt.Errorf("%w (server said: %v)", err, last)
}

package stream

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// ErrNotAdmin is matched (errors.Is) by the error of Admin.CheckPermissions
// when the server refuses the connection's user a right of the admin's role
// (a *NotAdminError).
var ErrNotAdmin = errors.New("the connection lacks the admin's permissions")

// NotAdminError is a right of the admin's role (docs/security.md) that the
// server refused the connection's user. It matches ErrNotAdmin and
// nats.ErrPermissionViolation.
type NotAdminError struct {
	// Op is what was refused: "publish" or "subscribe".
	Op string
	// Subject is the refused subject.
	Subject string
	// Err is the server's refusal.
	Err error
}

func (e *NotAdminError) Error() string {
	return fmt.Sprintf("may not %s to %q: the admin's role holds the whole JetStream API", e.Op, e.Subject)
}

// Is matches ErrNotAdmin.
func (e *NotAdminError) Is(target error) bool { return target == ErrNotAdmin }

// Unwrap returns the server's refusal.
func (e *NotAdminError) Unwrap() error { return e.Err }

// checkBound is how long CheckPermissions waits for the server's answer.
const checkBound = 5 * time.Second

// checkMu serializes CheckPermissions, which sets a connection's error
// handler for its duration: two checks at once on one connection would
// otherwise leave the first one's handler installed.
var checkMu sync.Mutex

// violationRe reads the server's "Permissions Violation for Publish to "X"".
var violationRe = regexp.MustCompile(`(?i)permissions violation for (publish|subscription) to "([^"]+)"`)

// CheckPermissions says whether the admin's connection carries the admin's
// permissions, before an operator relies on them: nil when it does, a
// *NotAdminError (ErrNotAdmin) naming the refused right when the server
// refuses them, and another error when the server does not answer within
// 5 seconds or ctx ends first. It asks for the JetStream account's
// information, which the shipped nats.conf grants to the admin alone (the
// producer and the worker use named parts of the JetStream API only) and a
// server without users to everyone, and changes nothing. Under a nats.conf
// of other roles a user that may ask this and not all else passes the
// check, and each call it may not make is refused then.
//
// A refusal comes from the server as an asynchronous error of the
// connection: for the check's duration the connection's error handler is
// wrapped, and every error still reaches the handler set before.
func (a *Admin) CheckPermissions(ctx context.Context) error {
	js, err := jetStreamOf(a.nc, a.cfg.Topology)
	if err != nil {
		return err
	}
	subject := "$JS.API.INFO"
	if d := a.cfg.Topology.Domain; d != "" {
		subject = "$JS." + d + ".API.INFO"
	}
	ctx, cancel := context.WithTimeoutCause(ctx, checkBound, errors.New("no answer to a JetStream account info request within 5s"))
	defer cancel()
	refused := make(chan *NotAdminError, 1)

	checkMu.Lock()
	defer checkMu.Unlock()
	prev := a.nc.ErrorHandler()
	a.nc.SetErrorHandler(func(nc *nats.Conn, sub *nats.Subscription, err error) {
		if m := violationRe.FindStringSubmatch(err.Error()); m != nil && errors.Is(err, nats.ErrPermissionViolation) &&
			(m[2] == subject || strings.HasPrefix(m[2], nats.InboxPrefix)) {
			op := "publish"
			if strings.EqualFold(m[1], "subscription") {
				op = "subscribe"
			}
			select {
			case refused <- &NotAdminError{Op: op, Subject: m[2], Err: err}:
			default:
			}
			cancel()
		}
		if prev != nil {
			prev(nc, sub, err)
		}
	})
	defer a.nc.SetErrorHandler(prev)

	_, err = js.AccountInfo(ctx)
	select {
	case ne := <-refused:
		return ne
	default:
	}
	if err == nil {
		return nil
	}
	if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
		return fmt.Errorf("check the admin's permissions: %w", cause)
	}
	return fmt.Errorf("check the admin's permissions: %w", err)
}

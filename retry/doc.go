// Package retry decides what happens to a task around a solving attempt:
// whether to start it at all (Policy.Start: budget spent, deadline passed),
// and afterwards (Policy.End) done, retry after a backoff delay, snooze
// without spending an attempt, stop the worker, or dead-letter with a Reason.
// Errors reach it as a Class (package solver classifies the service's codes).
// It is pure decision logic: no I/O, and the clock is always passed in, so
// every branch is table-tested.
package retry

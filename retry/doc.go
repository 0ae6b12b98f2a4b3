// Package retry decides what happens to a task after a solving attempt: done,
// retry after a backoff delay, snooze without spending an attempt, or
// dead-letter with a reason. It is pure decision logic: no I/O, and the clock
// is always passed in, so every branch is table-tested.
package retry

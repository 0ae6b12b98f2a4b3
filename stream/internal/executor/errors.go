package executor

import "errors"

// The errors a delivery decides on; no caller sees them.

// errStateMoved means another delivery of the same generation recorded a
// step after this one read the state: it holds the task now.
var errStateMoved = errors.New("another delivery of the task recorded a step meanwhile")

// errCanceled means the generation was canceled before the write: nothing
// more may start.
var errCanceled = errors.New("the task was canceled")

// errContended means a write lost its compare-and-set to other records of
// the task as often as it may try.
var errContended = errors.New("other writes for the task kept getting in the way")

package createtask

import "fmt"

// Family is a family of clients whose replies a server shapes alike. The
// zero Family is Anti-Captcha's, CapMonster Cloud's and 2captcha's: taskId
// a number, errorId the number of the code's row (ErrorID).
//
// CapSolver's clients read another shape: taskId a string, as CapSolver
// issues its ids ("taskId": "37223a89-…", a String:
// docs.capsolver.com/guide/api-createtask), and errorId 1 for any error
// ("errorId: 0 - no error, 1 - with error", same page; "if the errorId is
// returned with a value of 1", docs.capsolver.com/guide/api-error). Its Go
// SDK declares taskId a Go string and takes an error only from errorId 1
// (github.com/capsolver/capsolver-go, types.go capSolverResponse `TaskId
// string`; capsolver.go Solve `if capRes.ErrorId == 1`): a numeric taskId
// leaves it without an id to poll with, and errorId 16 is no error to it.
// No one shape serves both: a client of the zero Family that declares
// taskId an integer cannot read a string.
type Family string

// FamilyCapSolver is CapSolver's clients' Family.
const FamilyCapSolver Family = "capsolver"

// Validate says what is wrong with f: it is the zero Family or
// FamilyCapSolver.
func (f Family) Validate() error {
	if f != "" && f != FamilyCapSolver {
		return fmt.Errorf("client %q: want %q, or none for Anti-Captcha's, CapMonster Cloud's and 2captcha's clients", string(f), FamilyCapSolver)
	}
	return nil
}

// ID is id as f's clients read a taskId: its digits as a string for
// CapSolver's, a number for the others.
func (f Family) ID(id TaskID) any {
	if f == FamilyCapSolver {
		return id.String()
	}
	return id
}

// Err is the reply of an error with code and description as f's clients
// read it (Err; errorId 1 for CapSolver's).
func (f Family) Err(code, description string) ErrorReply {
	return f.Shape(Err(code, description))
}

// Shape is r as f's clients read it: for CapSolver's, an error's errorId
// is 1.
func (f Family) Shape(r ErrorReply) ErrorReply {
	if f == FamilyCapSolver && r.Failed() {
		r.ErrorID = 1
	}
	return r
}

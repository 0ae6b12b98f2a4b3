package dispatcher

import (
	"sync"
	"sync/atomic"

	"github.com/captchaq/captchaq/solver"
)

// FinishingPerThread × Threads tasks at most record their outcomes after
// their threads went on to the next task. Recording is two or three
// exchanges with the broker, no work of the service's; with no room left a
// task keeps its thread until it is recorded, so a slow broker slows the
// intake instead of piling up finished solves. stream.WorkerConfig.Threads
// states its value to users.
const FinishingPerThread = 4

// Slot is a worker thread held by one task.
type Slot struct {
	free      chan<- struct{}
	finishing chan struct{}
	once      sync.Once
	finisher  bool // holds room in finishing
	detached  bool // given back by Detach: Solved takes no room
	// away counts the dispatcher's tasks that go on after giving their
	// threads back (Dispatcher.Away); nil: not counted. gone is set when
	// this slot's task is one of them.
	away *atomic.Int32
	gone bool
	// claim is the room of the solving client's plan window reserved for
	// the task (Dispatcher.Room); nil without one.
	claim *solver.PlanClaim
}

// Claim is the room of the plan window reserved for the slot's task, for
// its Solve to take (solver.WithPlanClaim); nil when none is. Solved and
// End give it back if the Solve did not take it.
func (s *Slot) Claim() *solver.PlanClaim {
	if s == nil {
		return nil
	}
	return s.claim
}

// Solved frees the thread once the service is done with the task, when there
// is room for one more task recording its outcome. A second call does
// nothing (it takes no second room).
func (s *Slot) Solved() {
	if s == nil || s.finisher || s.detached {
		return
	}
	s.claim.Release()
	select {
	case s.finishing <- struct{}{}:
		s.finisher = true
		s.giveBack()
	default:
	}
}

// Detach frees the thread for the next task while the task goes on: its
// captcha waits at a service paid per solve, which the worker's threads,
// sized for a thread plan, do not bound (solver.WithDetach). It takes no
// room in finishing: the Solver bounds how many tasks are detached at
// once. A second call, or one after Solved freed the thread, does
// nothing; so does Solved after it.
func (s *Slot) Detach() {
	if s == nil || s.finisher || s.detached {
		return
	}
	s.claim.Release()
	s.detached = true
	s.giveBack()
}

// giveBack frees the thread while the task goes on, counting the task in
// away until End.
func (s *Slot) giveBack() {
	s.once.Do(func() {
		s.free <- struct{}{}
		if s.away != nil {
			s.away.Add(1)
			s.gone = true
		}
	})
}

// End frees the thread, if solved did not, and the room.
func (s *Slot) End() {
	s.claim.Release()
	s.once.Do(func() { s.free <- struct{}{} })
	if s.finisher {
		<-s.finishing
	}
	if s.gone {
		s.away.Add(-1)
	}
}

// NewSlot is a thread taken from free, which End gives back, with room in
// finishing taken while its task records its outcome after Solved.
func NewSlot(free chan<- struct{}, finishing chan struct{}) *Slot {
	return &Slot{free: free, finishing: finishing}
}

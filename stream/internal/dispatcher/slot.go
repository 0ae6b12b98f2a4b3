package dispatcher

import "sync"

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
}

// Solved frees the thread once the service is done with the task, when there
// is room for one more task recording its outcome. A second call does
// nothing (it takes no second room).
func (s *Slot) Solved() {
	if s == nil || s.finisher {
		return
	}
	select {
	case s.finishing <- struct{}{}:
		s.finisher = true
		s.once.Do(func() { s.free <- struct{}{} })
	default:
	}
}

// End frees the thread, if solved did not, and the room.
func (s *Slot) End() {
	s.once.Do(func() { s.free <- struct{}{} })
	if s.finisher {
		<-s.finishing
	}
}

// NewSlot is a thread taken from free, which End gives back, with room in
// finishing taken while its task records its outcome after Solved.
func NewSlot(free chan<- struct{}, finishing chan struct{}) *Slot {
	return &Slot{free: free, finishing: finishing}
}

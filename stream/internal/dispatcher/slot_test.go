package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlotKeepsThreadWithoutRoom: with no room for another task recording
// its outcome, a solved task keeps its thread until it is recorded.
func TestSlotKeepsThreadWithoutRoom(t *testing.T) {
	t.Parallel()
	free := make(chan struct{}, 2)
	finishing := make(chan struct{}, 1)
	a, b := NewSlot(free, finishing), NewSlot(free, finishing)
	a.Solved()
	require.Len(t, free, 1, "room to record: the thread is free")
	b.Solved()
	require.Len(t, free, 1, "no room to record: the thread is kept")
	a.End()
	require.Len(t, free, 1, "a's thread was freed once only")
	require.Empty(t, finishing, "a gave its room back")
	b.End()
	require.Len(t, free, 2, "b's thread is freed when it ends")
	var nilSlot *Slot
	nilSlot.Solved() // handle called without a slot
}

// TestSlotDetach: a detached task gives its thread back at once, without
// room in finishing (which may be full), once only, and is counted as
// detached until it ends.
func TestSlotDetach(t *testing.T) {
	t.Parallel()
	free := make(chan struct{}, 2)
	finishing := make(chan struct{}, 1)
	finishing <- struct{}{} // no room to record
	dp := New(nil)
	a := NewSlot(free, finishing)
	a.away = &dp.detached
	a.Detach()
	require.Len(t, free, 1, "the thread is free while the task goes on")
	require.Equal(t, 1, dp.Detached())
	a.Solved()
	a.Detach()
	require.Len(t, free, 1, "freed once only")
	require.Len(t, finishing, 1, "no room taken")
	a.End()
	require.Len(t, free, 1, "not freed again when it ends")
	require.Zero(t, dp.Detached())
	var nilSlot *Slot
	nilSlot.Detach() // handle called without a slot
}

package dispatcher

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSlotKeepsThreadWithoutRoom: with no room for another task recording
// its outcome, a solved task keeps its thread until it is recorded. One
// that gave its thread back counts as away (not a thread in use) until it
// ends; one that kept it does not.
func TestSlotKeepsThreadWithoutRoom(t *testing.T) {
	t.Parallel()
	free := make(chan struct{}, 2)
	finishing := make(chan struct{}, 1)
	dp := New(nil)
	a, b := NewSlot(free, finishing), NewSlot(free, finishing)
	a.away, b.away = &dp.away, &dp.away
	a.Solved()
	require.Len(t, free, 1, "room to record: the thread is free")
	require.Equal(t, 1, dp.Away())
	b.Solved()
	require.Len(t, free, 1, "no room to record: the thread is kept")
	require.Equal(t, 1, dp.Away(), "b holds its thread")
	a.End()
	require.Len(t, free, 1, "a's thread was freed once only")
	require.Empty(t, finishing, "a gave its room back")
	require.Zero(t, dp.Away())
	b.End()
	require.Len(t, free, 2, "b's thread is freed when it ends")
	require.Zero(t, dp.Away())
	var nilSlot *Slot
	nilSlot.Solved() // handle called without a slot
}

// TestSlotDetach: a detached task gives its thread back at once, without
// room in finishing (which may be full), once only, and is counted as
// away until it ends.
func TestSlotDetach(t *testing.T) {
	t.Parallel()
	free := make(chan struct{}, 2)
	finishing := make(chan struct{}, 1)
	finishing <- struct{}{} // no room to record
	dp := New(nil)
	a := NewSlot(free, finishing)
	a.away = &dp.away
	a.Detach()
	require.Len(t, free, 1, "the thread is free while the task goes on")
	require.Equal(t, 1, dp.Away())
	a.Solved()
	a.Detach()
	require.Len(t, free, 1, "freed once only")
	require.Len(t, finishing, 1, "no room taken")
	a.End()
	require.Len(t, free, 1, "not freed again when it ends")
	require.Zero(t, dp.Away())
	var nilSlot *Slot
	nilSlot.Detach() // handle called without a slot
}

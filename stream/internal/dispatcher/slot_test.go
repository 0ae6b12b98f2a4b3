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

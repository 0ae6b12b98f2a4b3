package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestForgedBudgetPerID(t *testing.T) {
	t.Parallel()
	var f ForgedBudget
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for i := range ForgedPerIDBurst {
		d := f.decide("a", t0)
		require.True(t, d.record, "copy %d within the burst", i)
		require.Zero(t, d.ended)
	}
	d := f.decide("a", t0)
	require.False(t, d.record, "past the burst")
	require.True(t, d.warn, "the first copy ended unrecorded is said")
	require.Equal(t, 1, d.ended)
	for i := range 998 {
		d = f.decide("a", t0.Add(time.Duration(i)*time.Millisecond))
		require.False(t, d.record)
		require.False(t, d.warn, "said once")
	}
	require.Equal(t, 999, d.ended)
	require.True(t, f.decide("b", t0).record, "another id has a budget of its own")

	d = f.decide("a", t0.Add(ForgedPerIDEvery))
	require.True(t, d.record, "one more once the period has passed")
	require.Equal(t, 999, d.ended, "the recorded copy names those ended since the last")
	require.Equal(t, t0, d.since)
	d = f.decide("a", t0.Add(ForgedPerIDEvery))
	require.False(t, d.record)
	require.True(t, d.warn, "said again after a record")
	require.Equal(t, 1, d.ended)
}

func TestForgedBudgetPerWorker(t *testing.T) {
	t.Parallel()
	var f ForgedBudget
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	recorded := 0
	for i := range 1000 {
		if f.decide(fmt.Sprintf("id-%d", i), t0).record {
			recorded++
		}
	}
	require.Equal(t, ForgedBurst, recorded, "the worker's burst, whatever the ids")
	require.True(t, f.decide("id-999", t0.Add(ForgedEvery)).record,
		"an id denied by the worker's budget kept its own token")
	require.False(t, f.decide("id-998", t0.Add(ForgedEvery)).record, "one a period")
}

func TestForgedBudgetForgetsIdleIDs(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	f := ForgedBudget{ids: map[string]*forgedID{}}
	for i := range forgedIDs {
		f.ids[fmt.Sprintf("id-%d", i)] = &forgedID{b: bucket{spent: ForgedPerIDBurst, at: t0}}
	}
	d := f.decide("one-more", t0)
	require.False(t, d.record, "no room to remember another id while every one is spent")
	require.True(t, d.warn)
	require.False(t, f.decide("yet-another", t0).warn, "said once a period")
	require.Len(t, f.ids, forgedIDs)
	later := t0.Add(ForgedPerIDBurst * ForgedPerIDEvery)
	require.True(t, f.decide("one-more", later).record, "ids whose budget is whole again are forgotten")
	require.Len(t, f.ids, 1)
}

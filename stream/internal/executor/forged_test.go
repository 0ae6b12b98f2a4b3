package executor

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
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

// forgedDelivery stores and delivers a task message under id whose message
// id is not id.
func (b *bundle) forgedDelivery(t *testing.T, id string, i int) *fakeMsg {
	t.Helper()
	h := nats.Header{}
	h.Set(wire.HeaderMsgID, fmt.Sprintf("%s-forged-%d", id, i))
	b.store.mu.Lock()
	gen := b.store.put(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, id), h, []byte(turnstile))
	b.store.mu.Unlock()
	return b.redeliver(gen, id, h, turnstile, 1)
}

// outcomes returns the outcomes stored under id.
func (s *fakeStore) outcomes(t *testing.T, id string) []wire.Outcome {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []wire.Outcome
	for _, r := range s.recs {
		if r.subject == wire.ResultSubject(id) {
			var o wire.Outcome
			require.NoError(t, json.Unmarshal(r.data, &o))
			out = append(out, o)
		}
	}
	return out
}

// Past the per-id budget, forged copies are acked with nothing written,
// each observed; the next recorded copy says how many were ended since.
func TestExecuteForgedPastTheBudgetWritesNothing(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	b.x.Forged = &ForgedBudget{}
	const n = ForgedPerIDBurst + 5
	for i := range n {
		m := b.forgedDelivery(t, "f1", i)
		b.x.Execute(context.Background(), m, noThread{}, noSlot{})
		require.Equal(t, "ack", m.how(), "copy %d ends", i)
	}
	require.Zero(t, b.solves)
	require.Len(t, b.store.outcomes(t, "f1"), ForgedPerIDBurst, "the burst is recorded, the rest not")
	require.Len(t, b.store.events(t, "f1"), ForgedPerIDBurst)
	forged := 0
	for _, k := range b.observed {
		if k == KindForged {
			forged++
		}
	}
	require.Equal(t, n, forged, "every copy is observed")

	// The id's budget is whole again.
	b.x.Forged.mu.Lock()
	b.x.Forged.ids["f1"].b = bucket{}
	b.x.Forged.mu.Unlock()
	m := b.forgedDelivery(t, "f1", n)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})
	outs := b.store.outcomes(t, "f1")
	require.Len(t, outs, ForgedPerIDBurst+1)
	require.Contains(t, outs[len(outs)-1].Detail, "5 more forged messages under this id ended without a record since")
}

// A recorded forged copy whose write keeps losing its race with other
// records of the id ends with an ack, not after the ack wait.
func TestExecuteForgedThatLosesItsRaceEnds(t *testing.T) {
	t.Parallel()
	b := setup(t, solver.Answer{Solution: json.RawMessage(`"tok"`)}, nil)
	b.x.Forged = &ForgedBudget{}
	// Another record of the id comes first, before every write.
	var interfere func(s *fakeStore)
	interfere = func(s *fakeStore) {
		s.mu.Lock()
		s.put(wire.EventSubject("f1"), nats.Header{}, []byte(`{}`))
		s.mu.Unlock()
		s.beforeAppend = interfere
	}
	b.store.beforeAppend = interfere
	m := b.forgedDelivery(t, "f1", 0)
	b.x.Execute(context.Background(), m, noThread{}, noSlot{})
	require.Equal(t, "ack", m.how())
	require.Empty(t, b.store.outcomes(t, "f1"))
	require.Contains(t, b.observed, KindForged)
}

package gateway

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream"
)

// Outcomes stored under a task's id before Submit returned its generation
// are kept: the one of that generation ends the task when the generation
// is known, the others (someone else's, under the same id) never do.
func TestOutcomesBeforeTheGenerationIsKnown(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // no background reads: this test feeds the outcomes itself
	g := &Gateway{cfg: Config{Now: time.Now}, tasks: map[string]*entry{}, past: map[string]pastTask{}, ctx: ctx}
	c := &caller{Key: Key{Producer: "p"}, inFlight: 1}
	e := &entry{caller: c, num: "1"}
	g.tasks["p-1"] = e

	forged := stream.Outcome{ID: "p-1", Status: stream.StatusDead, Error: "INVALID_ENVELOPE"}
	own := stream.Outcome{ID: "p-1", Status: stream.StatusDead, Error: "ERROR_CAPTCHA_UNSOLVABLE"}
	g.record(forged, 9)
	g.record(own, 7)
	require.False(t, e.done, "no generation known yet: nothing ends it")
	g.gotGen(e, "p-1", 7, time.Now().Add(time.Minute))
	require.True(t, e.done)
	require.Equal(t, "ERROR_CAPTCHA_UNSOLVABLE", e.out.Error, "its own generation's outcome")
	require.Zero(t, c.inFlight)

	// A task whose generation is known takes no other's outcome.
	e2 := &entry{caller: c, num: "2"}
	g.tasks["p-2"] = e2
	c.inFlight++
	g.gotGen(e2, "p-2", 20, time.Now().Add(time.Minute))
	g.record(stream.Outcome{ID: "p-2", Status: stream.StatusSolved}, 21)
	require.False(t, e2.done, "another generation's outcome")
	require.Equal(t, 1, c.inFlight)
	g.record(stream.Outcome{ID: "p-2", Status: stream.StatusDead, Error: "DEADLINE_PASSED"}, 20)
	require.True(t, e2.done)
	require.Zero(t, c.inFlight)

	// More early outcomes than kept: none of them is taken for its own.
	e3 := &entry{caller: c, num: "3"}
	g.tasks["p-3"] = e3
	c.inFlight++
	for gen := range uint64(maxEarly + 2) {
		g.record(stream.Outcome{ID: "p-3", Status: stream.StatusDead, Error: "INVALID_ENVELOPE"}, 100+gen)
	}
	g.gotGen(e3, "p-3", 50, time.Now().Add(time.Minute))
	require.False(t, e3.done, "its own is read from the stream (not here: the gateway is closed)")
	require.True(t, e3.overflow)
}

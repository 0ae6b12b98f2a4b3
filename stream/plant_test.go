package stream

import (
	"encoding/json"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A token written on a generation's token subject after its outcome's,
// copying the outcome's solve (captcha id, solve time, attempts: all in the
// outcome, which producers read), is never handed out: a reader takes the
// token the outcome names (wire.HeaderTokenSeq), not the subject's last.
// (Only the streams' account can write there; this is what a reader still
// guarantees if someone of it, or a link that joins it, does.)
func TestReaderTakesTheTokenItsOutcomeNamesNotAPlantedOne(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	js, s := b.raw(t)
	var solves atomic.Int32
	b.startWorker(t, WorkerConfig{Solver: countingSolver(&solves)})
	r, err := b.client.Submit(ctx, turnstileTask("planted-late"))
	require.NoError(t, err)
	o := waitOutcome(ctx, t, s, "planted-late", r.Seq)
	require.Equal(t, StatusSolved, o.Status)

	forged := o
	forged.Solution = json.RawMessage(`"PLANTED"`)
	body, err := json.Marshal(forged)
	require.NoError(t, err)
	m := nats.NewMsg(wire.TokenSubject("planted-late", r.Seq))
	m.Data = body
	_, err = js.PublishMsg(ctx, m)
	require.NoError(t, err)

	got, err := b.client.Wait(ctx, "planted-late")
	require.NoError(t, err)
	require.Equal(t, `"tok-0x4AAAAAAAB-1"`, string(got.Solution), "the outcome's own token")
	var seen []string
	require.NoError(t, b.client.OutcomesSince(ctx, o.SolvedAt.Add(-time.Minute), false, func(o Outcome) { seen = append(seen, string(o.Solution)) }))
	require.Equal(t, []string{`"tok-0x4AAAAAAAB-1"`}, seen)
}

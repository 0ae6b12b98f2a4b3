package stream

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A client that did not submit a task waits by its id for its latest real
// submission: a later message on the id that a worker ended INVALID_ENVELOPE
// (here one claiming to replay a dead letter that does not exist) is not
// taken for the task's latest generation, though both were erased once done.
func TestWaitByIDOfAnotherClientSkipsForgedGenerations(t *testing.T) {
	t.Parallel()
	a := attackSetup(t)
	ctx := testContext(t)
	r, err := a.victim.Submit(ctx, turnstileTask("order-9"))
	require.NoError(t, err)
	evil := `{"method":"turnstile","params":{"sitekey":"0xATTACKER","pageurl":"https://evil.example/"}}`
	forged := publishRaw(ctx, t, a.attacker, "captcha.tasks.fast.normal.order-9", evil,
		map[string]string{"Nats-Msg-Id": wire.ReplayMsgID("order-9", "1"), wire.HeaderReplayedBy: "1"})
	require.Greater(t, forged.Sequence, r.Seq)

	a.startWorker(t)
	out, err := a.victim.waitGen(ctx, "order-9", r.Seq)
	require.NoError(t, err)
	require.Contains(t, out.Text(), "0x4AAAAAAAB")
	o := waitOutcome(ctx, t, a.astream, "order-9", forged.Sequence)
	require.Equal(t, CodeInvalidEnvelope, o.Error, o.Detail)

	nc, _ := roleConn(t, a.ns, "producer")
	other, err := NewClient(ctx, nc, ClientConfig{Name: "another"})
	require.NoError(t, err)
	out, err = other.Wait(ctx, "order-9")
	require.NoError(t, err, "the victim's generation, not the forged one")
	require.Contains(t, out.Text(), "0x4AAAAAAAB", "the victim's token")
	require.Equal(t, int32(1), a.solves.Load(), "only the victim's task was paid for")
}

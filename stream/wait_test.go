package stream

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
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

// WaitAll reports a task whose solve is recorded, whose outcome never came
// (its worker stopped between the two) and whose token has expired as
// ErrTokenExpired once it has read all there is, rather than following
// the stream for an outcome that is no use any more.
func TestWaitAllEndsAtTokenExpiryWithoutOutcome(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	r, err := b.client.Submit(ctx, turnstileTask("lost-all"))
	require.NoError(t, err)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	ev, err := json.Marshal(Event{Kind: EventSolved, Gen: r.Seq, Attempts: 1,
		At: time.Now().Add(-time.Minute), ExpiresAt: time.Now().Add(-time.Second)})
	require.NoError(t, err)
	_, err = js.Publish(ctx, wire.EventSubject("lost-all"), ev)
	require.NoError(t, err)
	// Without the check it follows until its context ends: bounded far
	// beyond the milliseconds it takes.
	wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	var got []error
	require.NoError(t, b.client.WaitAll(wctx, []Receipt{r}, func(o Outcome, err error) {
		require.Equal(t, StatusSolved, o.Status)
		got = append(got, err)
	}))
	require.Len(t, got, 1)
	require.ErrorIs(t, got[0], ErrTokenExpired)
}

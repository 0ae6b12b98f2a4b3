package stream

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// reopenStore shuts the bundle's JetStream down and enables it again, as
// the server's store guard does after a full disk (broker.Guard): for a
// moment every read meets "no responders", then, until the token stream
// (in memory, emptied) is created again and its tokens stored again in
// their order, "stream not found". down is called while JetStream is shut
// down, gone while the token stream is missing.
func (b *bundle) reopenStore(t *testing.T, down, gone func()) {
	t.Helper()
	ctx := testContext(t)
	js, err := jetstream.New(b.nc)
	require.NoError(t, err)
	ts, err := js.Stream(ctx, b.top.TokenStream())
	require.NoError(t, err)
	info, err := ts.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.State.FirstSeq, "the tokens stored again keep their sequences")
	var tokens []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; seq <= info.State.LastSeq; seq++ {
		m, err := ts.GetMsg(ctx, seq)
		require.NoError(t, err)
		tokens = append(tokens, m)
	}

	cfg := *b.ns.JetStreamConfig()
	require.NoError(t, b.ns.ShutdownJetStream())
	down()
	cfg.StoreDir = filepath.Dir(cfg.StoreDir) // EnableJetStream adds "jetstream"
	require.NoError(t, b.ns.EnableJetStream(&cfg))
	gone()
	ensureAsAdmin(t, b.nc, b.top)
	// The token stream answers, empty, while the tokens are stored again
	// (the store guard's restore takes a moment): a reader then waits for
	// them rather than calling them lost.
	time.Sleep(300 * time.Millisecond) //nolint:forbidigo // the restore's moment is the scenario
	for _, m := range tokens {
		hdr := nats.Header{}
		for k, v := range m.Header {
			if k != jetstream.MsgTTLHeader {
				hdr[k] = v
			}
		}
		_, err := js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: hdr, Data: m.Data})
		require.NoError(t, err)
	}
}

// TestReadersWaitThroughAStoreReopen: a store reopened under waiting
// readers (JetStream shut down and enabled again, the token stream created
// again after it) is a pause, not an error: Wait (of one's own submission
// and of another's), WaitReceipt, WaitAll and OutcomesSince each return
// their outcome, token included, once the store answers again.
func TestReadersWaitThroughAStoreReopen(t *testing.T) {
	t.Parallel()
	b := setup(t, Topology{})
	ctx := testContext(t)
	var receipts []Receipt
	for _, id := range []string{"reopen-0", "reopen-1", "reopen-2", "reopen-3", "reopen-4"} {
		r, err := b.client.Submit(ctx, turnstileTask(id))
		require.NoError(t, err)
		receipts = append(receipts, r)
	}
	rw := b.startWorker(t, WorkerConfig{Solver: tokenSolver()})
	require.NoError(t, b.client.WaitAll(ctx, receipts, func(o Outcome, err error) { require.NoError(t, err, o.ID) }))
	rw.stop()
	rw.done <- <-rw.done // stopped; its cleanup reads it again

	other, err := NewClient(ctx, b.connect(t), ClientConfig{Topology: b.top, Name: "other-producer"})
	require.NoError(t, err)
	type read struct {
		who string
		out Outcome
		err error
	}
	reads := make(chan read, len(receipts))
	check := func(who string, fn func(context.Context) (Outcome, error)) {
		go func() {
			o, err := fn(ctx)
			reads <- read{who, o, err}
		}()
	}
	b.reopenStore(t, func() {
		// The readers start while JetStream is down.
		check("Wait of its own", func(ctx context.Context) (Outcome, error) { return b.client.Wait(ctx, receipts[0].ID) })
		check("Wait of another's", func(ctx context.Context) (Outcome, error) { return other.Wait(ctx, receipts[1].ID) })
		check("WaitReceipt", func(ctx context.Context) (Outcome, error) { return b.client.WaitReceipt(ctx, receipts[2]) })
		check("WaitAll", func(ctx context.Context) (Outcome, error) {
			// No require here: a FailNow off the test's goroutine would
			// end this reader without its read, and the test would wait
			// for it until its timeout.
			var out Outcome
			var oerr error
			err := b.client.WaitAll(ctx, receipts[3:4], func(o Outcome, err error) { out, oerr = o, err })
			return out, errors.Join(err, oerr)
		})
		check("OutcomesSince", func(ctx context.Context) (Outcome, error) {
			ctx, cancel := context.WithCancel(ctx)
			defer cancel()
			var out Outcome
			err := b.client.OutcomesSince(ctx, time.Time{}, true, func(o Outcome) {
				if o.ID == receipts[4].ID {
					out = o
					cancel()
				}
			})
			if out.ID != "" {
				err = nil
			}
			return out, err
		})
		// Down as long as a reopening takes.
		time.Sleep(500 * time.Millisecond)
	}, func() { time.Sleep(500 * time.Millisecond) })

	for range receipts {
		r := <-reads
		if !assert.NoError(t, r.err, r.who) {
			continue
		}
		require.Equal(t, StatusSolved, r.out.Status, r.who)
		require.NotEmpty(t, r.out.Solution, "%s: the token, stored again", r.who)
	}
}

// Relaying owners' cancels: every worker listens to the headers the stream
// republishes of owners' cancel records (captcha.stored.cancels.<id>.<gen>)
// and turns a valid one into a record of the task (captcha.cancels.<id>),
// which every later delivery reads with the task's state at no cost and
// which makes a running delivery's next attempt write fail. A forged record
// costs each worker two direct gets when it is stored, once, and no
// delivery anything.

package upkeep

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/wire"
)

// relayQueue bounds the owners' cancels waiting to be checked. One that
// does not fit is dropped: a delivery still finds it among the first
// records of its subject (taskstore.CancelOf).
const relayQueue = 1024

// CancelRelay relays owners' cancels to their tasks' records while it
// runs.
type CancelRelay struct {
	// NC listens to the republished headers; JS and Stream read and write
	// the task's records in the stream named StreamName, in JetStream
	// domain Domain.
	NC         *nats.Conn
	JS         jetstream.JetStream
	Stream     jetstream.Stream
	StreamName string
	Domain     string
	Log        *slog.Logger

	r runner
}

// Start listens for owners' cancels and relays them until ctx ends or
// Stop; an error says it could not listen.
func (c *CancelRelay) Start(ctx context.Context) error {
	queue := make(chan uint64, relayQueue)
	sub, err := c.NC.Subscribe(wire.StoredSubject(wire.SubjectCancels+".*.*"), func(m *nats.Msg) {
		seq, err := strconv.ParseUint(m.Header.Get("Nats-Sequence"), 10, 64)
		if err != nil {
			return
		}
		select {
		case queue <- seq:
		default:
		}
	})
	if err != nil {
		return err
	}
	c.r.run(ctx, func(ctx context.Context) {
		defer func() { _ = sub.Unsubscribe() }()
		for {
			select {
			case <-ctx.Done():
				return
			case seq := <-queue:
				c.relay(ctx, seq)
			}
		}
	})
	return nil
}

// Stop stops relaying and waits until the relay has.
func (c *CancelRelay) Stop() { c.r.stop() }

// relay checks the owner's cancel record at seq and, when it holds
// the secret its task message's hash names and the generation has no
// cancel record yet, stores one among the task's records.
func (c *CancelRelay) relay(ctx context.Context, seq uint64) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	m, err := c.Stream.GetMsg(ctx, seq)
	if err != nil {
		return
	}
	parts := strings.Split(m.Subject, ".")
	if len(parts) != 4 || parts[0]+"."+parts[1] != wire.SubjectCancels {
		return
	}
	id := parts[2]
	gen, err := strconv.ParseUint(parts[3], 10, 64)
	if err != nil {
		return
	}
	rec := wire.ParseCancel(m.Data, gen)
	if rec == nil || rec.Secret == "" {
		return
	}
	task, err := c.Stream.GetLastMsgForSubject(ctx, wire.TaskMessagesFor(id))
	if err != nil {
		return // the task is done (its message is gone)
	}
	taskGen, submitted := wire.TaskMessageGen(task.Header, task.Sequence, task.Time)
	if taskGen != gen || !wire.OwnsCancel(task.Header, rec.Secret) {
		return // forged, or the task is done
	}
	if spent, err := taskstore.SecretSpent(ctx, c.NC, c.Domain, c.StreamName, id, gen, rec.Secret); err != nil || spent {
		return // a secret that went out on another generation's record proves nothing
	}
	if taskGen != task.Sequence && taskstore.VerifyMoved(ctx, c.Stream, id, gen,
		wire.MovedDigest(task.Subject, task.Header, task.Data, gen, submitted)) != nil {
		return // a copy no worker moved: its cancel hash proves nothing
	}
	if last, err := c.Stream.GetLastMsgForSubject(ctx, wire.CancelRecordSubject(id)); err == nil && wire.ParseCancel(last.Data, gen) != nil {
		return // relayed already
	} else if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
		return
	}
	rec.Secret = "" // the task's records never hold it
	b, err := json.Marshal(rec)
	if err != nil {
		return
	}
	if _, err := jscall.PublishRetrying(ctx, c.JS, &nats.Msg{Subject: wire.CancelRecordSubject(id), Data: b}, jetstream.WithExpectStream(c.StreamName)); err != nil {
		c.Log.Warn("cannot relay an owner's cancel; the next delivery looks for it itself", slog.String("task_id", id), slog.Any("error", err))
		return
	}
	c.Log.Info("relayed the owner's cancel", slog.String("task_id", id))
}

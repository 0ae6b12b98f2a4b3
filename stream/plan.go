package stream

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// PlanOption is an optional setting of Admin.SetPlan.
type PlanOption func(*planOptions)

type planOptions struct{ early bool }

// PlanEarly makes workers give a plan thread back when the captcha holding it
// is probably solved at the service (solver.WithProbablyReady), not when its
// answer is fetched, so the next captcha is submitted about when the service
// frees the thread. The service then may, for a moment, be sent more
// captchas than the plan's threads: a wrong guess is refused there with a
// capacity code (no attempt spent), and the solver guesses later after
// each refusal. Without it captchaq never has more captchas at the
// service than the quota.
func PlanEarly() PlanOption { return func(o *planOptions) { o.early = true } }

// setPlan is Admin.SetPlan of topology t on nc.
func setPlan(ctx context.Context, nc *nats.Conn, t Topology, threads int, opts ...PlanOption) error {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return err
	}
	t = t.withDefaults()
	var o planOptions
	for _, opt := range opts {
		opt(&o)
	}
	if threads < 0 {
		return fmt.Errorf("plan threads %d: want 0 or more", threads)
	}
	if threads == 0 {
		err := js.DeleteStream(ctx, dispatcher.PlanStream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("remove the plan quota: %w", err)
		}
		return nil
	}
	storage := t.storage()
	// Exactly threads messages, and no room for one more: whatever anyone
	// publishes on the plan's subject, or has a push consumer deliver there
	// (JetStream does not check a consumer's deliver subject against its
	// creator's publish permissions), is refused, so the quota is only ever
	// what the admin set.
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        dispatcher.PlanStream,
		Description: "captchaq: one message per thread of the solving plan",
		Subjects:    []string{dispatcher.PlanSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     int64(threads),
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    t.Replicas,
		Metadata:    map[string]string{dispatcher.PlanMetaThreads: strconv.Itoa(threads), dispatcher.PlanMetaEarly: strconv.FormatBool(o.early)},
	})
	if err != nil {
		return fmt.Errorf("plan stream: %w", err)
	}
	if _, err := s.CreateOrUpdateConsumer(ctx, jetstream.ConsumerConfig{
		Durable:       dispatcher.PlanConsumer,
		Description:   "captchaq workers hold one message per captcha at the service",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}); err != nil {
		return fmt.Errorf("plan consumer: %w", err)
	}
	info, err := s.Info(ctx)
	if err != nil {
		return fmt.Errorf("plan stream: %w", err)
	}
	if info.State.Msgs == uint64(threads) {
		return nil
	}
	if err := s.Purge(ctx); err != nil {
		return fmt.Errorf("reset plan threads: %w", err)
	}
	gen := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range threads {
		if _, err := js.Publish(ctx, dispatcher.PlanSubject, []byte(strconv.Itoa(i)), jetstream.WithMsgID("thread-"+gen+"-"+strconv.Itoa(i))); err != nil {
			return fmt.Errorf("plan thread %d: %w", i, err)
		}
	}
	return nil
}

// storage is where the streams keep their messages: on disk, in memory with
// Memory.
func (t Topology) storage() jetstream.StorageType {
	if t.Memory {
		return jetstream.MemoryStorage
	}
	return jetstream.FileStorage
}

// PlanThreads returns the plan-wide thread quota of t, 0 when none is set
// (Admin.SetPlan sets it). Every role may read it.
func PlanThreads(ctx context.Context, nc *nats.Conn, t Topology) (int, error) {
	js, err := jetStreamOf(nc, t)
	if err != nil {
		return 0, err
	}
	n, _, err := dispatcher.PlanSettings(ctx, js)
	return n, err
}

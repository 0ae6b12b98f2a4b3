package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// EnsurePlan makes the plan stream of t hold threads messages, one per
// thread of the plan, with its consumer, or removes it when threads is 0;
// early is the plan's PlanEarly setting (dispatcher.PlanMetaEarly);
// fromService marks a quota set from the plan the service told
// (dispatcher.PlanMetaSource), which an operator's setting replaces and
// the service's next reading may change.
func EnsurePlan(ctx context.Context, js jetstream.JetStream, t Spec, threads int, early, fromService bool) error {
	if threads == 0 {
		err := js.DeleteStream(ctx, dispatcher.PlanStream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("remove the plan quota: %w", err)
		}
		return nil
	}
	storage := t.Storage()
	// Exactly threads messages, and no room for one more: whatever anyone
	// publishes on the plan's subject, or has a push consumer deliver there
	// (JetStream does not check a consumer's deliver subject against its
	// creator's publish permissions), is refused, so the quota is only ever
	// what the admin set.
	meta := map[string]string{dispatcher.PlanMetaThreads: strconv.Itoa(threads), dispatcher.PlanMetaEarly: strconv.FormatBool(early)}
	if fromService {
		meta[dispatcher.PlanMetaSource] = dispatcher.PlanSourceService
	}
	s, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name:        dispatcher.PlanStream,
		Description: "captchaq: one message per thread of the solving plan",
		Subjects:    []string{dispatcher.PlanSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     int64(threads),
		Discard:     jetstream.DiscardNew,
		Storage:     storage,
		Replicas:    t.Replicas,
		Metadata:    meta,
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

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
	if h, ok := ctx.Value(serviceWriteHookKey{}).(func()); ok && fromService {
		h()
	}
	if threads == 0 {
		err := js.DeleteStream(ctx, dispatcher.PlanStream)
		if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
			return fmt.Errorf("remove the plan quota: %w", err)
		}
		return nil
	}
	// Exactly threads messages, and no room for one more: whatever anyone
	// publishes on the plan's subject, or has a push consumer deliver there
	// (JetStream does not check a consumer's deliver subject against its
	// creator's publish permissions), is refused, so the quota is only ever
	// what the admin set.
	meta := map[string]string{dispatcher.PlanMetaThreads: strconv.Itoa(threads), dispatcher.PlanMetaEarly: strconv.FormatBool(early)}
	if fromService {
		meta[dispatcher.PlanMetaSource] = dispatcher.PlanSourceService
	}
	cfg := jetstream.StreamConfig{
		Name:        dispatcher.PlanStream,
		Description: "captchaq: one message per thread of the solving plan",
		Subjects:    []string{dispatcher.PlanSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     int64(threads),
		Discard:     jetstream.DiscardNew,
		Storage:     t.Storage(),
		Replicas:    t.Replicas,
		Metadata:    meta,
	}
	// Another admin may set the quota at the same moment: an operator
	// (captchaq init --plan-threads) while the server sets the service's
	// (stream.Admin.FollowServicePlan), or another operator. Each write
	// is read back before and after its threads are published: an
	// operator's quota is written again over the service's that replaced
	// it, and gives way to another operator's (errAnotherOperatorsPlan:
	// its caller reads the record to learn which stands,
	// ApplyOperatorPlan); a quota from the service gives way to whatever
	// replaced it (an operator's, or a later reading). So the stream ends
	// with exactly the threads of the quota it holds, not the other's
	// count, nor "maximum messages exceeded" to the operator; a service's
	// write that lands after the operator's returned is undone by its
	// writer (EnsureServicePlan: TestOperatorQuotaSetWhileTheServerFollowsWins,
	// TestAnOperatorsQuotaSetJustBeforeTheFollowersWriteWins).
	var s jetstream.Stream
	write := true
	last := errors.New("still set by another admin")
	for try := range planTries {
		if write {
			// Bounded (planCallWait): on a cluster, an
			// update racing another operator's create after a removal can
			// go unanswered (TestBreakTwoOperatorsOnTwoNodesOfACluster:
			// both calls waited for their whole context); written again.
			wctx, cancel := context.WithTimeout(ctx, planCallWait)
			var err error
			s, err = js.CreateOrUpdateStream(wctx, cfg)
			cancel()
			if err != nil && !fromService && ctx.Err() == nil {
				// Created by the other at the same moment (stream name
				// already in use), or a store error of the server's while
				// the other updates it (meta.inf.tmp not found): the
				// operator's is written again after a moment; the
				// service's waits for its next reading.
				last = err
				retryPlanWrite(ctx, js, err, try)
				continue
			}
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
			}); err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				if !fromService && storeFailed(err) && ctx.Err() == nil {
					last = fmt.Errorf("plan consumer: %w", err)
					retryPlanWrite(ctx, js, err, try)
					continue
				}
				return fmt.Errorf("plan consumer: %w", err)
			}
			write = false
		}
		info, err := s.Info(ctx)
		switch {
		case errors.Is(err, jetstream.ErrStreamNotFound) && fromService:
			return nil // an operator removed the quota meanwhile
		case errors.Is(err, jetstream.ErrStreamNotFound):
			write = true
			continue
		case err != nil:
			return fmt.Errorf("plan stream: %w", err)
		}
		if !samePlan(info.Config.Metadata, meta) {
			if fromService {
				return nil // the other's quota stands
			}
			if info.Config.Metadata[dispatcher.PlanMetaSource] != dispatcher.PlanSourceService {
				return errAnotherOperatorsPlan
			}
			write = true
			continue
		}
		if info.State.Msgs == uint64(threads) {
			return nil
		}
		pctx, cancel := context.WithTimeout(ctx, planCallWait)
		err = s.Purge(pctx)
		cancel()
		if err != nil {
			if unanswered(ctx, err) && !fromService {
				write = true // unanswered (as the write above): written again
				continue
			}
			if errors.Is(err, jetstream.ErrStreamNotFound) {
				if fromService {
					return nil // an operator removed the quota meanwhile
				}
				write = true // removed by another operator: the caller's record decides
				continue
			}
			if !fromService && storeFailed(err) && ctx.Err() == nil {
				last, write = fmt.Errorf("reset plan threads: %w", err), true
				retryPlanWrite(ctx, js, err, try)
				continue
			}
			return fmt.Errorf("reset plan threads: %w", err)
		}
		gen := strconv.FormatInt(time.Now().UnixNano(), 36)
		for i := range threads {
			pctx, cancel := context.WithTimeout(ctx, planCallWait)
			_, err := js.Publish(pctx, dispatcher.PlanSubject, []byte(strconv.Itoa(i)), jetstream.WithMsgID("thread-"+gen+"-"+strconv.Itoa(i)))
			cancel()
			var api *jetstream.APIError
			if errors.As(err, &api) && api.ErrorCode == errCodeMaxMsgs {
				break // the other's threads, or its smaller quota: read it back
			}
			if errors.Is(err, jetstream.ErrNoStreamResponse) || unanswered(ctx, err) {
				break // removed meanwhile: read it back
			}
			if err != nil {
				return fmt.Errorf("plan thread %d: %w", i, err)
			}
		}
	}
	return fmt.Errorf("plan stream: %d tries: %w", planTries, last)
}

// planCallWait bounds the wait for the answer to each of EnsurePlan's
// calls of the plan stream: its write, its purge and each thread's
// publish. Another operator removing the quota (SetPlan(0)) at that
// moment deletes the stream after it took the message and before it
// answered, and on a cluster an update racing the other's create may go
// unanswered (TestBreakTwoOperatorsOnTwoNodesOfACluster); each would wait
// for its whole context (init's 30 s) unless bounded. A call unanswered
// for this long is read back, or made again, within planTries.
const planCallWait = 2 * time.Second

// unanswered reports whether err is a call's planCallWait running out
// while the caller's ctx still runs.
func unanswered(ctx context.Context, err error) bool {
	return errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil
}

// errAnotherOperatorsPlan is EnsurePlan's answer to an operator's write
// when another operator's quota replaced it: the writer reads the record
// (OperatorPlanStream) to learn which of the two stands, instead of the
// two writing over each other until one runs out of tries.
var errAnotherOperatorsPlan = errors.New("plan stream: another operator's quota replaced this one")

// planTries bounds EnsurePlan's read-backs while another admin sets the
// quota too.
const planTries = 20

// retryPlanWrite waits before an operator's quota is written again after
// err, at most 100 ms. A store's failure (storeFailed) deletes the plan
// stream first: nats-server v2.15.3's file store, when a delete races a
// create of the same stream, can keep the stream while its directory is
// gone ("open …/meta.inf.tmp: no such file or directory" at each update,
// a consumer's "rename …/o.dat.tmp", a purge's "no message cache"), and
// fails every write to it until it is deleted. The quota is being
// replaced: made anew, it holds (TestOperatorQuotaSetWhileTheServerFollowsWins
// failed 3 of 10 runs on disk with the write only retried).
func retryPlanWrite(ctx context.Context, js jetstream.JetStream, err error, try int) {
	if storeFailed(err) {
		_ = js.DeleteStream(ctx, dispatcher.PlanStream)
	}
	select {
	case <-ctx.Done():
	case <-time.After(time.Duration(min(try+1, 10)) * 10 * time.Millisecond):
	}
}

// storeFailed reports whether err is JetStream's answer for a failure of
// the server's own (HTTP-like code 500: its store), not a refusal.
func storeFailed(err error) bool {
	var api *jetstream.APIError
	return errors.As(err, &api) && api.Code >= 500
}

// errCodeMaxMsgs is JetStream's "maximum messages exceeded" (a stream
// of DiscardNew full).
const errCodeMaxMsgs jetstream.ErrorCode = 10077

// samePlan reports whether the plan stream's metadata got is want's quota.
func samePlan(got, want map[string]string) bool {
	for _, k := range []string{dispatcher.PlanMetaThreads, dispatcher.PlanMetaEarly, dispatcher.PlanMetaSource} {
		if got[k] != want[k] {
			return false
		}
	}
	return true
}

// serviceWriteHookKey is the context key of WithServiceWriteHook.
type serviceWriteHookKey struct{}

// WithServiceWriteHook returns ctx with f, which EnsurePlan calls before
// it writes (or removes) a quota from the service, where an operator's write may land
// between the follower's reading and its write: tests run one there.
func WithServiceWriteHook(ctx context.Context, f func()) context.Context {
	return context.WithValue(ctx, serviceWriteHookKey{}, f)
}

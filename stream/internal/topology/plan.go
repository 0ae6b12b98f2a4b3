package topology

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// EnsurePlan makes the plan stream of t hold threads live threads, one
// message each, with its consumer, or removes it when threads is 0;
// early is the plan's PlanEarly setting (dispatcher.PlanMetaEarly);
// fromService marks a quota set from the plan the service told
// (dispatcher.PlanMetaSource), which an operator's setting replaces and
// the service's next reading may change.
//
// A change never removes a thread a worker holds (settlePlan): its
// captcha is at the service, and a thread published in its place would
// let one more captcha go there, at each change made while the service
// holds them (TestBreakRacingOperatorsPileThreadsAtTheService). A larger
// quota publishes only what the live threads lack, taking
// retiring threads back first; a smaller one deletes free threads (taken
// from the consumer as a worker takes one) and marks the surplus of held
// ones retiring (dispatcher.PlanMetaRetiring), which their holders
// remove as their captchas end (an ack, under the stream's interest
// retention: no right the workers' role lacked). So the captchas at the
// service never exceed the largest quota set while they were there,
// whatever the number of changes.
//
// MaxMsgs is the quota and the discard policy DiscardNew, which refuses a
// message while the stream holds MaxMsgs or more and, lowered, drops
// none: the stream is full from the first write on, with retiring threads
// over the quota until they leave, so whatever anyone publishes on the
// plan's subject, or has a push consumer deliver there (JetStream does
// not check a consumer's deliver subject against its creator's publish
// permissions), is refused, and the quota is only ever what the admin
// set. A stream made empty (a memory store after the server's restart)
// gets all its threads again.
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
	meta := map[string]string{dispatcher.PlanMetaThreads: strconv.Itoa(threads), dispatcher.PlanMetaEarly: strconv.FormatBool(early)}
	if fromService {
		meta[dispatcher.PlanMetaSource] = dispatcher.PlanSourceService
	}
	cfg := jetstream.StreamConfig{
		Name:        dispatcher.PlanStream,
		Description: "captchaq: one message per thread of the solving plan",
		Subjects:    []string{dispatcher.PlanSubject},
		Retention:   jetstream.InterestPolicy,
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
	// Each write carries the retiring threads (dispatcher.PlanMetaRetiring)
	// the stream names: a write without them would hand those threads
	// back to the pool while their captchas are at the service.
	// Each call of the plan stream is bounded (planCallWait): on a
	// cluster, a call racing another operator's removal and create can go
	// unanswered (TestBreakTwoOperatorsOnTwoNodesOfACluster).
	var retiring []uint64
	rctx, cancel := context.WithTimeout(ctx, planCallWait)
	if old, err := js.Stream(rctx, dispatcher.PlanStream); err == nil {
		retiring = liveRetiring(old.CachedInfo())
	}
	cancel()
	silent := false // the last publish went unanswered
	for try := range planTries {
		if write {
			// Bounded (planCallWait): on a cluster, an
			// update racing another operator's create after a removal can
			// go unanswered (TestBreakTwoOperatorsOnTwoNodesOfACluster:
			// both calls waited for their whole context); written again.
			cfg.Metadata = withRetiring(meta, retiring)
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
			cctx, cancel := context.WithTimeout(ctx, planCallWait)
			_, err = s.CreateOrUpdateConsumer(cctx, planConsumer(t))
			cancel()
			if unanswered(ctx, err) {
				continue // written again
			}
			if err != nil && !errors.Is(err, jetstream.ErrStreamNotFound) {
				if !fromService && storeFailed(err) && ctx.Err() == nil {
					last = fmt.Errorf("plan consumer: %w", err)
					retryPlanWrite(ctx, js, err, try)
					continue
				}
				return fmt.Errorf("plan consumer: %w", err)
			}
			write = false
		}
		ictx, cancel := context.WithTimeout(ctx, planCallWait)
		info, err := s.Info(ictx, jetstream.WithDeletedDetails(true))
		cancel()
		switch {
		case unanswered(ctx, err):
			write = true // written again, read back after
			continue
		case errors.Is(err, jetstream.ErrStreamNotFound) && fromService:
			return nil // an operator removed the quota meanwhile
		case errors.Is(err, jetstream.ErrStreamNotFound):
			write = true
			continue
		case err != nil:
			return fmt.Errorf("plan stream: %w", err)
		}
		retiring = liveRetiring(info)
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
		step, err := settlePlan(ctx, js, s, info, threads, retiring)
		if errors.Is(err, errThreadUnanswered) {
			// The stream is there (read just now) and a publish went
			// unanswered: removed meanwhile (read back next), or, twice
			// in a row, nats-server's file store broken by a delete that
			// raced a create (retryPlanWrite), which answers no publish
			// until the stream is deleted (TestTwoOperatorsSettingQuotasAtOnceLeaveTheRecordAndThePlanAgreeing,
			// "0 and 4" on disk: the next SetPlan(2) alone spun until its
			// context ended, "plan thread 0: context deadline exceeded").
			unansweredTwice := silent
			silent, err = true, nil
			if unansweredTwice && !fromService && ctx.Err() == nil {
				_ = js.DeleteStream(ctx, dispatcher.PlanStream)
				silent, write = false, true
				continue
			}
		} else {
			silent = false
		}
		switch {
		case err != nil && (unanswered(ctx, err) || errors.Is(err, jetstream.ErrStreamNotFound)):
			if fromService && errors.Is(err, jetstream.ErrStreamNotFound) {
				return nil // an operator removed the quota meanwhile
			}
			write = true // unanswered, or removed by another operator: written again, the caller's record decides
		case err != nil && !fromService && storeFailed(err) && ctx.Err() == nil:
			last, write = err, true
			retryPlanWrite(ctx, js, err, try)
		case err != nil:
			return err
		case step.done:
			return nil
		case step.retiring != nil:
			retiring, write = step.retiring, true
		}
	}
	return fmt.Errorf("plan stream: %d tries: %w", planTries, last)
}

// planCallWait bounds the wait for the answer to each of EnsurePlan's
// calls of the plan stream: its write, each free thread's delete and
// each thread's publish. Another operator removing the quota (SetPlan(0)) at that
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

// planStep is what settlePlan leaves to EnsurePlan's loop: done, or the
// stream to write again naming retiring (non-nil), or (neither) to read
// it back.
type planStep struct {
	done     bool
	retiring []uint64
}

// settlePlan moves the plan stream, which holds the quota threads (its
// metadata, read in info), one step towards threads live threads that are
// not retiring, never removing a thread a worker holds: its captcha is at
// the service, and a thread published in its place would put one captcha
// more there than the quota. The live threads are the stream's messages
// (a retiring thread's holder acks it, and the interest retention removes
// it), so:
//   - fewer than threads: retiring ones are taken back first, then the
//     difference is published;
//   - more (retiring ones included): free ones are taken from the plan's
//     consumer as a worker takes them and deleted, and when only held
//     ones are left, the surplus is marked retiring.
//
// So the captchas at the service never exceed the largest quota that
// held while they were submitted, whatever the number of changes.
func settlePlan(ctx context.Context, js jetstream.JetStream, s jetstream.Stream, info *jetstream.StreamInfo, threads int, retiring []uint64) (planStep, error) {
	live := int(info.State.Msgs)
	active := live - len(retiring)
	switch {
	case active < threads && len(retiring) > 0:
		back := min(len(retiring), threads-active)
		return planStep{retiring: slices.Clone(retiring[:len(retiring)-back])}, nil
	case active < threads:
		return planStep{}, publishThreads(ctx, js, threads-live)
	case live == threads:
		return planStep{done: true}, nil
	}
	// More threads than the quota: a free one, retiring or not, goes now
	// (one not retiring leaves a retiring one to take back at the next
	// step), so none is left free to hand out over the quota.
	took, err := deleteFreeThreads(ctx, s, live-threads)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		return planStep{retiring: slices.Clone(retiring)}, nil // written again with its consumer
	case err != nil || took > 0:
		return planStep{}, err
	case active == threads:
		return planStep{done: true}, nil // the surplus is retiring, every thread held
	}
	held := make([]uint64, 0, active)
	gone := make(map[uint64]bool, len(info.State.Deleted))
	for _, seq := range info.State.Deleted {
		gone[seq] = true
	}
	for seq := info.State.FirstSeq; live > 0 && seq <= info.State.LastSeq; seq++ {
		if !gone[seq] && !slices.Contains(retiring, seq) {
			held = append(held, seq)
		}
	}
	mark := held[max(0, len(held)-(active-threads)):]
	return planStep{retiring: append(slices.Clone(retiring), mark...)}, nil
}

// errThreadUnanswered is publishThreads' answer when a publish got no
// answer: the stream removed meanwhile, or its store broken (EnsurePlan).
var errThreadUnanswered = errors.New("plan thread: no answer")

// publishThreads publishes n new threads on the plan stream. A refusal
// as full (another admin's threads, or its smaller quota) ends it, and a
// publish unanswered ends it with errThreadUnanswered: EnsurePlan reads
// the stream back.
func publishThreads(ctx context.Context, js jetstream.JetStream, n int) error {
	gen := strconv.FormatInt(time.Now().UnixNano(), 36)
	for i := range n {
		pctx, cancel := context.WithTimeout(ctx, planCallWait)
		_, err := js.Publish(pctx, dispatcher.PlanSubject, []byte(strconv.Itoa(i)), jetstream.WithMsgID("thread-"+gen+"-"+strconv.Itoa(i)))
		cancel()
		var api *jetstream.APIError
		if errors.As(err, &api) && api.ErrorCode == errCodeMaxMsgs {
			return nil
		}
		if errors.Is(err, jetstream.ErrNoStreamResponse) || unanswered(ctx, err) {
			return errThreadUnanswered
		}
		if err != nil {
			return fmt.Errorf("plan thread %d: %w", i, err)
		}
	}
	return nil
}

// deleteFreeThreads takes up to n free threads from the plan's consumer,
// without waiting, as a worker takes one, and deletes them; it returns how
// many it took. A thread it took and failed to delete goes back to the
// pool after the consumer's ack wait.
func deleteFreeThreads(ctx context.Context, s jetstream.Stream, n int) (int, error) {
	cctx, cancel := context.WithTimeout(ctx, planCallWait)
	c, err := s.Consumer(cctx, dispatcher.PlanConsumer)
	cancel()
	if err != nil {
		return 0, fmt.Errorf("plan consumer: %w", err)
	}
	batch, err := c.FetchNoWait(n)
	if err != nil {
		return 0, fmt.Errorf("free plan threads: %w", err)
	}
	took := 0
	for m := range batch.Messages() {
		md, err := m.Metadata()
		if err != nil {
			return took, fmt.Errorf("free plan thread: %w", err)
		}
		dctx, cancel := context.WithTimeout(ctx, planCallWait)
		err = s.DeleteMsg(dctx, md.Sequence.Stream)
		cancel()
		if err != nil && !errors.Is(err, jetstream.ErrMsgNotFound) {
			return took, fmt.Errorf("remove free plan thread %d: %w", md.Sequence.Stream, err)
		}
		took++
	}
	// The batch's own error (none free, or a worker's pull waiting before
	// this one) leaves the threads not taken as held: a free one marked
	// retiring is removed by the next Acquire that takes it, or here.
	return took, nil
}

// liveRetiring returns the retiring threads info's metadata names that
// the stream still holds, in order.
func liveRetiring(info *jetstream.StreamInfo) []uint64 {
	gone := make(map[uint64]bool, len(info.State.Deleted))
	for _, seq := range info.State.Deleted {
		gone[seq] = true
	}
	var out []uint64
	for seq := range dispatcher.ParseRetiring(info.Config.Metadata) {
		if info.State.Msgs > 0 && seq >= info.State.FirstSeq && seq <= info.State.LastSeq && !gone[seq] {
			out = append(out, seq)
		}
	}
	slices.Sort(out)
	return out
}

// withRetiring returns meta naming retiring (dispatcher.PlanMetaRetiring),
// without the key when none is.
func withRetiring(meta map[string]string, retiring []uint64) map[string]string {
	out := maps.Clone(meta)
	if len(retiring) == 0 {
		return out
	}
	seqs := make([]string, len(retiring))
	for i, seq := range retiring {
		seqs[i] = strconv.FormatUint(seq, 10)
	}
	out[dispatcher.PlanMetaRetiring] = strings.Join(seqs, ",")
	return out
}

// PlanLook is a look at the plan stream: its quota, how many live
// threads (retiring ones aside) it lacks for it, and what would change
// with any write or publish to it (LastSeq, the metadata), so that two
// looks tell whether anyone changed it in between. The zero PlanLook is
// no stream.
type PlanLook struct {
	Plan dispatcher.Plan
	Lack int
	last uint64
	meta string
	cons int // the stream's consumers; -1: the plan's own is gone
}

// LookAtPlan reads the plan stream (PlanLook). A stream without the
// plan's consumer lacks every thread: under interest retention a thread
// published with no consumer there is dropped (nats-server v2.15.3
// stream.go, processJetStreamMsg: "If we are interest based retention and
// have no consumers then we can skip", answered as stored).
func LookAtPlan(ctx context.Context, js jetstream.JetStream) (PlanLook, error) {
	ctx, cancel := context.WithTimeout(ctx, planCallWait)
	defer cancel()
	s, err := js.Stream(ctx, dispatcher.PlanStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return PlanLook{}, nil
	}
	if err != nil {
		return PlanLook{}, fmt.Errorf("plan stream: %w", err)
	}
	info, err := s.Info(ctx, jetstream.WithDeletedDetails(true))
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return PlanLook{}, nil
	}
	if err != nil {
		return PlanLook{}, fmt.Errorf("plan stream: %w", err)
	}
	meta := info.Config.Metadata
	plan, err := dispatcher.PlanOf(meta)
	if err != nil {
		return PlanLook{}, err
	}
	threads := plan.Threads
	look := PlanLook{
		Plan: plan,
		last: info.State.LastSeq,
		meta: fmt.Sprint(meta), // fmt prints a map's keys sorted
		cons: info.State.Consumers,
	}
	look.Lack = threads
	if info.State.Consumers == 0 {
		return look, nil
	}
	// The plan's own consumer: with another one on the stream (an
	// operator's), the threads stay when it is removed, and no worker
	// can hold one (TestBreakTheHealPutsBackThePlansConsumerBesideAnother).
	_, err = s.Consumer(ctx, dispatcher.PlanConsumer)
	switch {
	case errors.Is(err, jetstream.ErrConsumerNotFound):
		look.cons = -1
		return look, nil
	case errors.Is(err, jetstream.ErrStreamNotFound):
		return PlanLook{}, nil
	case err != nil:
		return PlanLook{}, fmt.Errorf("plan consumer: %w", err)
	}
	look.Lack = max(0, threads-(int(info.State.Msgs)-len(liveRetiring(info))))
	return look, nil
}

// planConsumer is the plan's consumer of t.
func planConsumer(t Spec) jetstream.ConsumerConfig {
	return jetstream.ConsumerConfig{
		Durable:       dispatcher.PlanConsumer,
		Description:   "captchaq workers hold one message per captcha at the service",
		AckPolicy:     jetstream.AckExplicitPolicy,
		AckWait:       t.AckWait,
		MaxDeliver:    -1,
		MaxAckPending: -1,
		DeliverPolicy: jetstream.DeliverAllPolicy,
	}
}

// HealPlan puts back the threads the plan stream lacks (the server's
// heal, stream.Admin.healPlan): its consumer, when gone, on the stream as
// it is, then a thread for each the stream lacks for its MaxMsgs. It
// writes no quota and creates no stream: a quota another admin removed
// or changed after the heal's look stands (an operator's SetPlan(0), a
// newer reading of the service's; TestBreakTheHealLeavesAChangeMadeAfterItsLook:
// written through EnsurePlan, the heal put back the service's 6 and the
// operator's 4 after SetPlan(0), and 6 over a newer reading of 3). The
// stream's MaxMsgs is the quota it holds now, and its DiscardNew refuses
// a thread over it, retiring ones counted, so what the heal publishes
// never runs the pool over the quota, whatever changed since its look.
// It returns how many threads it put back.
func HealPlan(ctx context.Context, js jetstream.JetStream, t Spec) (int, error) {
	if h, ok := ctx.Value(serviceWriteHookKey{}).(func()); ok {
		h()
	}
	// The reads and the consumer's creation are bounded together
	// (planCallWait), each publish on its own (publishThreads): a lack
	// of thousands of threads is not cut off at 2 s.
	cctx, cancel := context.WithTimeout(ctx, planCallWait)
	defer cancel()
	s, err := js.Stream(cctx, dispatcher.PlanStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("plan stream: %w", err)
	}
	// Under interest retention a thread published with no consumer is
	// dropped: the consumer first, created when gone, never updated (an
	// operator's, of the operator's ack wait, stays as it is).
	_, err = s.Consumer(cctx, dispatcher.PlanConsumer)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		_, err = s.CreateConsumer(cctx, planConsumer(t))
		if errors.Is(err, jetstream.ErrConsumerExists) {
			err = nil // created by another admin meanwhile
		}
	}
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("plan consumer: %w", err)
	}
	info, err := s.Info(cctx)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("plan stream: %w", err)
	}
	before := info.State.Msgs
	if err := publishThreads(ctx, js, int(info.Config.MaxMsgs)-int(before)); err != nil {
		return 0, err
	}
	ictx, cancel := context.WithTimeout(ctx, planCallWait)
	defer cancel()
	if info, err = s.Info(ictx); err != nil {
		return 0, nil // put back, or not: the next look tells
	}
	return max(0, int(info.State.Msgs)-int(before)), nil
}

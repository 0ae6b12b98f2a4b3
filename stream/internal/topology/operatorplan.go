// The operator's record of the plan quota, and the service's quota set
// beside it.

package topology

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
)

// OperatorPlanStream records the plan quota an operator set
// (stream.Admin.SetPlan, `captchaq init --plan-threads`) in its metadata
// (dispatcher.PlanMetaThreads, dispatcher.PlanMetaEarly; threads "0": the
// operator set none), and holds no message. Only operators write it: the
// plan stream (dispatcher.PlanStream) is written by them and by the server
// that follows the service's plan, and a stream's update has no condition
// on what it replaces, so this record is what lets the follower find out
// that it wrote over an operator's quota (EnsureServicePlan). It needs an
// admin's rights, as the plan stream does; the workers never read it.
const OperatorPlanStream = "CAPTCHA_PLAN_OPERATOR"

// operatorPlanSubject is OperatorPlanStream's subject; nothing is
// published on it.
const operatorPlanSubject = "captcha-plan.operator"

// OperatorPlan is the quota an operator set, as OperatorPlanStream
// records it (Threads 0: none).
type OperatorPlan struct {
	Threads int
	Early   bool
}

// SetOperatorPlan records p as the operator's quota, before the operator
// writes it to the plan stream (EnsurePlan). A quota of 0 with no record
// yet records nothing: no operator set one.
func SetOperatorPlan(ctx context.Context, js jetstream.JetStream, t Spec, p OperatorPlan) error {
	if p.Threads == 0 {
		if _, err := js.Stream(ctx, OperatorPlanStream); errors.Is(err, jetstream.ErrStreamNotFound) {
			return nil
		}
	}
	cfg := jetstream.StreamConfig{
		Name:        OperatorPlanStream,
		Description: "captchaq: the plan quota an operator set, in its metadata; no messages",
		Subjects:    []string{operatorPlanSubject},
		Retention:   jetstream.LimitsPolicy,
		MaxMsgs:     1,
		Discard:     jetstream.DiscardNew,
		Storage:     t.Storage(),
		Replicas:    t.Replicas,
		Metadata: map[string]string{
			dispatcher.PlanMetaThreads: strconv.Itoa(p.Threads),
			dispatcher.PlanMetaEarly:   strconv.FormatBool(p.Early),
		},
	}
	// Another operator may create the record at the same moment (a new
	// queue): its creation answers "stream name already in use" to this
	// one, whose next try updates the record.
	var err error
	for range planTries {
		if _, err = js.CreateOrUpdateStream(ctx, cfg); !errors.Is(err, jetstream.ErrStreamNameAlreadyInUse) {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("record the operator's plan quota: %w", err)
	}
	return nil
}

// ReadOperatorPlan returns the quota an operator set (Threads 0: none,
// or none recorded).
func ReadOperatorPlan(ctx context.Context, js jetstream.JetStream) (OperatorPlan, error) {
	s, err := js.Stream(ctx, OperatorPlanStream)
	if errors.Is(err, jetstream.ErrStreamNotFound) {
		return OperatorPlan{}, nil
	}
	if err != nil {
		return OperatorPlan{}, fmt.Errorf("the operator's plan quota: %w", err)
	}
	meta := s.CachedInfo().Config.Metadata
	n, err := strconv.Atoi(meta[dispatcher.PlanMetaThreads])
	if err != nil {
		return OperatorPlan{}, fmt.Errorf("the operator's plan quota: bad %s metadata: %w", dispatcher.PlanMetaThreads, err)
	}
	return OperatorPlan{Threads: n, Early: meta[dispatcher.PlanMetaEarly] == "true"}, nil
}

// EnsureServicePlan sets the quota the service told (threads, early;
// threads 0 removes it) unless an operator's quota is recorded, and
// reports whether it did. The operator's quota wins, whatever the order:
// an operator records its quota (SetOperatorPlan) before writing it, and
// this writes before it reads the record again. So when this write lands
// after the operator's, the record read after it is the operator's, and
// the operator's quota is written again here (the broker answers a
// stream's info with its last update). With an operator's quota recorded
// it writes that one instead of the service's (EnsurePlan keeps one
// already there as it is): an operator's SetPlan cut off between its
// record and its write (killed, its connection lost) left the service's
// in the plan stream. Whenever the record changed while it wrote, the
// quota is written again for the record as it is now, until two readings
// of the record agree.
func EnsureServicePlan(ctx context.Context, js jetstream.JetStream, t Spec, threads int, early bool) (bool, error) {
	op, err := ReadOperatorPlan(ctx, js)
	if err != nil {
		return false, err
	}
	for range planTries {
		set := op.Threads == 0
		if set {
			err = EnsurePlan(ctx, js, t, threads, early, true)
		} else {
			err = EnsurePlan(ctx, js, t, op.Threads, op.Early, false)
		}
		if err != nil {
			return false, err
		}
		now, err := ReadOperatorPlan(ctx, js)
		if err != nil {
			return false, err
		}
		if now == op {
			return set, nil
		}
		op = now
	}
	return false, fmt.Errorf("plan stream: %d tries: the operator's quota kept changing", planTries)
}

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

// ApplyOperatorPlan records p as the operator's quota (SetOperatorPlan)
// and writes it to the plan stream (EnsurePlan). A stream's update has no
// condition on what it replaces, so two operators setting quotas at once
// could each write over the other's; the record decides instead: after
// each write, or after giving way to another operator's write
// (errAnotherOperatorsPlan), this reads the record, and it returns only
// when its write stood and the record read after it is what it wrote;
// otherwise it writes the record's quota. So the quota recorded last is
// the one the plan stream holds, whichever call returns last. It returns
// the quota it left held: p, or another operator's recorded after it.
//
// Why that converges, for any interleaving of two operators and the
// server following the service's plan (EnsureServicePlan, which keeps to
// the same rule): take the record's last update, by operator B, and the
// plan stream's last write, W. B writes the plan stream after its record,
// so W comes after the record's last update, and W's writer reads the
// record after W (the broker answers a stream's info with its last
// update) and finds B's quota. Had W written another quota, its writer
// would write again, and W would not be the last; so W wrote B's quota.
// The follower writes the service's reading only while the record holds
// no operator's quota, and otherwise the record's, so it never ends on a
// disagreement either. It ends: once each writer has read the record
// after its last update, all write the same quota and none gives way to
// another again.
//
// An operator whose quota another operator recorded later gets nil, as
// it would had the other's call come just after its own: the two calls
// ran at once, either order is theirs, and the later record holds
// everywhere. An error would say the quota failed to be set when it was
// set and then replaced, as any later call may replace it; the quota
// returned tells the operator which one holds. A quota recorded but never
// written (the call cut off) is put in by the follower at its next
// reading.
func ApplyOperatorPlan(ctx context.Context, js jetstream.JetStream, t Spec, p OperatorPlan) (OperatorPlan, error) {
	if err := SetOperatorPlan(ctx, js, t, p); err != nil {
		return OperatorPlan{}, err
	}
	for range planTries {
		err := EnsurePlan(ctx, js, t, p.Threads, p.Early, false)
		gaveWay := errors.Is(err, errAnotherOperatorsPlan)
		if err != nil && !gaveWay {
			return OperatorPlan{}, err
		}
		now, err := ReadOperatorPlan(ctx, js)
		if err != nil {
			return OperatorPlan{}, err
		}
		if now == p && !gaveWay {
			return p, nil
		}
		p = now
	}
	return OperatorPlan{}, fmt.Errorf("plan stream: %d tries: the operator's quota kept changing", planTries)
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
// of the record agree, and when it gave way to another operator's write
// (errAnotherOperatorsPlan) the record's quota is written again
// (ApplyOperatorPlan argues why the writers converge).
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
		gaveWay := errors.Is(err, errAnotherOperatorsPlan)
		if err != nil && !gaveWay {
			return false, err
		}
		now, err := ReadOperatorPlan(ctx, js)
		if err != nil {
			return false, err
		}
		if now == op && !gaveWay {
			return set, nil
		}
		op = now
	}
	return false, fmt.Errorf("plan stream: %d tries: the operator's quota kept changing", planTries)
}

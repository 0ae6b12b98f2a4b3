// The plan-wide quota set from the plan the service tells the workers.

package stream

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/pool"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// MaxServicePlan bounds the quota FollowServicePlan sets from a reading:
// captchaq's bound, not the service's (a larger plan is set with SetPlan,
// `captchaq init --plan-threads`). A reading is written by a worker's
// credentials, and the quota is one stream message per thread: a false
// reading of a billion threads would have the server publish them.
const MaxServicePlan = 10000

// FollowServicePlan sets the plan-wide thread quota (SetPlan) from the
// plan the solving service tells the workers (CaptchaAI's threadsinfo,
// solver.Config.PlanFromService), until ctx ends: the workers write each
// reading beside their plan windows (TimingsBucket), and the latest
// reading becomes the quota, marked as the service's, as it lands. So the
// service's plan is shared by the whole pool, as a plan told with SetPlan
// is: a worker with idle threads leaves them to the others, which a share
// of the plan fixed per worker cannot.
//
// A quota an operator set (SetPlan, `captchaq init --plan-threads`) is
// never changed: the operator's plan wins, also when it is set at the
// moment a reading is written (that write is followed by a look at the
// operator's record, and the operator's quota is put back over it:
// topology.EnsureServicePlan). One set from the service is
// changed by a later reading that differs; the early hand-back is opts'
// (PlanEarly), as SetPlan's. No reading, no change: the workers gone, the
// quota stays as the service last told it. It needs the timings bucket
// (EnsureTimings) and an admin's rights: the workers' role reads the
// quota and never sets it (docs/security.md). `captchaq server` runs it.
//
// Readings of more than one account (workers on different keys,
// pool.PlanWindow.Account) set no quota: one account's plan does not
// bound the captchas sent to another's, and the latest reading would
// flip the quota from one account's plan to the other's at each reading.
// One such reading removes a quota set from the service's (said once at
// WARN, naming how many accounts), and the workers hold their shares of
// their own accounts' plans, as without a server that follows, until
// the readings are of one account again.
//
// Every 10 s it also looks whether the plan stream lacks threads for the
// quota it holds, the service's or an operator's, and puts back a lack
// that two looks in a row found with nothing written in between
// (captchaq server does this), said at WARN.
//
// The workers read the quota before their first task, after their first
// reading (they wait a moment for this to set it, when it runs); one
// that was solving before the quota was set or changed holds its
// captchas at the service beside the quota's threads until they end,
// and the service may refuse a few submissions meanwhile (no attempt
// spent).
func (a *Admin) FollowServicePlan(ctx context.Context, log *slog.Logger, opts ...PlanOption) error {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	js, err := jetStreamOf(a.nc, a.cfg.Topology)
	if err != nil {
		return err
	}
	var o planOptions
	for _, opt := range opts {
		opt(&o)
	}
	// The follower's mark is stamped on the broker's clock, on which the
	// workers judge it (their own reading of it): a server's clock
	// minutes off theirs neither looks gone nor lingers.
	c, err := a.client(ctx)
	if err != nil {
		return err
	}
	now := c.brokerNow
	// The bucket first: without it, say where it is missing.
	if _, err := OpenTimings(ctx, a.nc, a.cfg.Topology); err != nil {
		return err
	}
	// Set while readings of several accounts hold no quota: said once.
	several := false
	follow := func(ws map[string]pool.PlanWindow) {
		told, accounts := pool.ServiceReading(ws)
		if accounts > 1 {
			a.unfollowAccounts(ctx, js, log, accounts, !several)
			several = true
			return
		}
		if told == 0 {
			return
		}
		if several {
			several = false
			log.Info("the workers' readings are of one account again: the plan-wide quota follows them")
		}
		read := told
		told = min(told, MaxServicePlan)
		plan, err := dispatcher.ReadPlan(ctx, js)
		switch {
		case err != nil:
			log.Warn("read the plan quota to follow the service's plan", slog.Any("error", err))
			return
		case plan.Threads > 0 && !plan.FromService:
			return // the operator's
		case plan.Threads == told && plan.Early == o.early && !operatorRecorded(ctx, js):
			return
		}
		set, err := topology.EnsureServicePlan(ctx, js, a.cfg.Topology.spec(), told, o.early)
		if err != nil {
			if ctx.Err() == nil {
				log.Warn("set the plan quota from the plan the service told", slog.Int("threads", told), slog.Any("error", err))
			}
			return
		}
		if !set {
			log.Info("an operator set the plan-wide quota as this server set the service's: the operator's stands", slog.Int("told", told))
			return
		}
		if read > told {
			log.Warn("plan-wide quota set from the plan the service told the workers, bounded: a larger plan is set with captchaq init --plan-threads",
				slog.Int("threads", told), slog.Int("told", read), slog.Int("was", plan.Threads))
			return
		}
		log.Info("plan-wide quota set from the plan the service told the workers", slog.Int("threads", told), slog.Int("was", plan.Threads))
	}
	if err := pool.FollowWindows(ctx, js, follow); err != nil {
		return fmt.Errorf("follow the plan the service tells: %w", err)
	}
	// Said once it follows, and again every PlanFollowerEvery: workers
	// that find a fresh mark wait for the quota before their first task,
	// and none waits for a server gone.
	if err := topology.MarkPlanFollower(ctx, js, now()); err != nil {
		return err
	}
	go func() {
		t := time.NewTicker(topology.PlanFollowerEvery)
		defer t.Stop()
		every := a.healEvery
		if every <= 0 {
			every = planHealEvery
		}
		heal := time.NewTicker(every)
		defer heal.Stop()
		var seen topology.PlanLook // the plan stream at the last look
		for {
			select {
			case <-ctx.Done():
				return
			case <-heal.C:
				seen = a.healPlan(ctx, js, log, seen)
			case <-t.C:
				if err := topology.MarkPlanFollower(ctx, js, now()); err != nil && ctx.Err() == nil {
					log.Warn("renew the mark that this server follows the plan the service tells", slog.Any("error", err))
				}
			}
		}
	}()
	return nil
}

// planHealEvery is how often FollowServicePlan looks whether the plan
// stream lacks threads (healPlan).
const planHealEvery = 10 * time.Second

// healPlan puts back the threads the plan stream lacks for the quota it
// holds (topology.PlanLook), the service's or an operator's, when it
// lacked them at the last look too and nothing changed it in between
// (prev): a change under way, which lacks its new threads for the moment
// between its metadata and its publishes, is not taken for a loss, and
// no third writer joins two admins at work. It returns this look.
//
// A quota change never removes a held thread, and so a thread can go
// missing: a retiring thread's ack landing just after a larger quota
// took it back (TestBreakARetiringAckLandingAfterTheTakeBackLosesAThread),
// or the plan's consumer removed (its threads go with it). Missing, it
// would stay so until the next change, and with every thread missing the
// pool would wait forever. An operator's quota is put back only as the
// operator's record (topology.ReadOperatorPlan) says it. The heal writes
// no quota (topology.HealPlan): it puts back the consumer and the threads
// the stream lacks for its MaxMsgs, the quota it holds when the heal
// publishes, so an admin's change after the look stands.
func (a *Admin) healPlan(ctx context.Context, js jetstream.JetStream, log *slog.Logger, prev topology.PlanLook) topology.PlanLook {
	look, err := topology.LookAtPlan(ctx, js)
	if err != nil || look.Lack == 0 || look != prev {
		return look
	}
	plan := look.Plan
	if !plan.FromService {
		op, err := topology.ReadOperatorPlan(ctx, js)
		if err != nil || op.Threads != plan.Threads || op.Early != plan.Early {
			return look
		}
	}
	put, err := topology.HealPlan(ctx, js, a.cfg.Topology.spec())
	if err != nil {
		if ctx.Err() == nil {
			log.Warn("put back the threads the plan-wide quota lacks", slog.Int("threads", plan.Threads), slog.Int("lacked", look.Lack), slog.Any("error", err))
		}
		return topology.PlanLook{}
	}
	if put > 0 {
		log.Warn("the plan-wide quota lacked threads: put back", slog.Int("threads", plan.Threads), slog.Int("lacked", look.Lack), slog.Int("put", put), slog.Bool("from_service", plan.FromService))
	}
	return topology.PlanLook{}
}

// unfollowAccounts removes the plan-wide quota set from the service's
// readings, now that they are of several accounts: such readings set
// none (FollowServicePlan). An operator's quota stays. warn says so at
// WARN, once for as long as the readings are of several accounts.
func (a *Admin) unfollowAccounts(ctx context.Context, js jetstream.JetStream, log *slog.Logger, accounts int, warn bool) {
	plan, err := dispatcher.ReadPlan(ctx, js)
	if err != nil {
		log.Warn("read the plan quota to follow the service's plan", slog.Any("error", err))
		return
	}
	service := plan.Threads > 0 && plan.FromService
	if warn {
		was := 0
		if service {
			was = plan.Threads
		}
		log.Warn("the workers read the plans of several accounts (different API keys): no plan-wide quota is set from them, each worker holds its share of its own account's plan; one account per pool, or captchaq init --plan-threads, sets one",
			slog.Int("accounts", accounts), slog.Int("was", was))
	}
	if !service {
		return
	}
	if _, err := topology.EnsureServicePlan(ctx, js, a.cfg.Topology.spec(), 0, false); err != nil && ctx.Err() == nil {
		log.Warn("remove the plan quota set from the plan the service told", slog.Any("error", err))
	}
}

// operatorRecorded reports whether an operator's quota is recorded
// (topology.ReadOperatorPlan) while the plan stream holds the service's:
// an operator's SetPlan cut off between its record and its write, whose
// quota the follower then puts in. A failed read counts as none.
func operatorRecorded(ctx context.Context, js jetstream.JetStream) bool {
	op, err := topology.ReadOperatorPlan(ctx, js)
	return err == nil && op.Threads > 0
}

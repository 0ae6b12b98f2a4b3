package stream

import (
	"context"
	"fmt"
	"time"

	"github.com/captchaq/captchaq/stream/internal/dispatcher"
	"github.com/captchaq/captchaq/stream/internal/room"
	"github.com/captchaq/captchaq/stream/internal/taskstore"
	"github.com/captchaq/captchaq/stream/internal/topology"
	"github.com/captchaq/captchaq/stream/wire"
)

// QueueStats is the state of one lane and priority: one workers' consumer.
// It is part of the wire contract of `captchaq stats --json`.
type QueueStats struct {
	// Lane is the queue's lane.
	Lane Lane `json:"lane"`
	// Priority is the queue's priority: "high" or "normal".
	Priority Priority `json:"priority"`
	// Queued is how many tasks wait for a worker: those never taken, and
	// those whose retry or capacity delay ended and that no worker has
	// taken again yet (a paused lane's, or while every thread is busy).
	Queued uint64 `json:"queued"`
	// InFlight is how many the queue's consumer holds as delivered:
	// solving, waiting out a retry delay, or due again after one.
	InFlight int `json:"in_flight"`
	// Solving is how many of them are at the solving service now.
	Solving int `json:"solving"`
	// Retrying is how many wait out a retry or capacity delay.
	Retrying int `json:"retrying"`
	// Limit is the most that may be in flight at once (the lane limit, or
	// the topology's MaxInFlight).
	Limit int `json:"limit"`
	// LaneLimit is the lane limit (Topology.LaneLimits); 0 when the queue
	// has none, only the topology's MaxInFlight.
	LaneLimit int `json:"lane_limit"`
	// Paused says workers take nothing from the queue (PauseLane) until
	// PausedUntil.
	Paused      bool      `json:"paused,omitempty"`
	PausedUntil time.Time `json:"paused_until,omitzero"`
	// DeadlinesInPause counts, in a paused queue, the tasks waiting there
	// (queued or retrying, not at the service) whose deadline falls before
	// PausedUntil: passed already, or passing while the queue is paused.
	// Each ends dead with DEADLINE_PASSED when a worker next takes it,
	// unless the lane is resumed before its deadline. 0 when not paused.
	DeadlinesInPause int `json:"deadlines_in_pause"`
	// FirstDeadline is the earliest of those deadlines; zero when none.
	FirstDeadline time.Time `json:"first_deadline,omitzero"`
	// OldestQueued is the age of the oldest waiting task; 0 when none waits.
	OldestQueued time.Duration `json:"-"`
	// OldestQueuedSeconds is OldestQueued in seconds, for JSON.
	OldestQueuedSeconds float64 `json:"oldest_queued_seconds"`
}

// MethodStats are the outcomes and solve times of one method within a Stats
// window.
type MethodStats struct {
	// Solved counts the method's tasks solved in the window.
	Solved int `json:"solved"`
	// Dead counts the method's tasks that died in the window.
	Dead int `json:"dead"`
	// P50 is the median solve time of the attempts that solved, in seconds
	// (nearest rank); 0 when none solved.
	P50 float64 `json:"p50_seconds"`
	// P95 is their 95th percentile, likewise.
	P95 float64 `json:"p95_seconds"`
}

// Stats is a snapshot of the queue and of the outcomes of a recent window,
// as Client.Stats returns it and `captchaq stats --json` prints it. It is
// part of the wire contract: fields may be added; these keep their names and
// meaning.
type Stats struct {
	// At is when the snapshot was taken; the window ends then.
	At time.Time `json:"at"`
	// Queues has one entry per lane and priority.
	Queues []QueueStats `json:"queues"`
	// Queued is the sum of the queues' Queued.
	Queued uint64 `json:"queued"`
	// InFlight is the sum of the queues' InFlight.
	InFlight int `json:"in_flight"`
	// OldestQueued is the age of the oldest waiting task of any queue; 0
	// when none waits.
	OldestQueued time.Duration `json:"-"`
	// OldestQueuedSeconds is OldestQueued in seconds, for JSON.
	OldestQueuedSeconds float64 `json:"oldest_queued_seconds"`
	// Solving is how many attempts are under way now across all workers:
	// tasks whose last event is an attempt.
	Solving int `json:"solving"`
	// Retrying is how many tasks wait out a retry or capacity delay: held
	// by the broker for a later delivery, at no worker.
	Retrying int `json:"retrying"`
	// DeadlinesInPause is the sum of the queues' DeadlinesInPause, and
	// FirstDeadline the earliest of their FirstDeadline.
	DeadlinesInPause int       `json:"deadlines_in_pause"`
	FirstDeadline    time.Time `json:"first_deadline,omitzero"`
	// Workers are the workers seen within HeartbeatTTL, by their last
	// heartbeats: a worker that said it stopped is among them (Stopped)
	// until its heartbeat expires.
	Workers []WorkerInfo `json:"workers"`
	// WorkersAlive counts the Workers still running; Threads and
	// ThreadsInUse sum their threads and the threads holding a task. A
	// stopped worker counts in none of them, whatever its last heartbeat
	// said was in use.
	WorkersAlive int `json:"workers_alive"`
	Threads      int `json:"threads"`
	ThreadsInUse int `json:"threads_in_use"`
	// PlanThreads is the plan-wide thread quota Solving is held to
	// (SetPlan); 0 when none is set.
	PlanThreads int `json:"plan_threads"`
	// PlanFromService: the server set PlanThreads from the plan the
	// service told the workers (Admin.FollowServicePlan), not an operator.
	PlanFromService bool `json:"plan_from_service,omitempty"`
	// LearnedPlan is, without a quota, the plan size the workers learned
	// from the service's capacity refusals: the sum of their plan windows
	// (solver.Config.LearnPlan, written to TimingsBucket); 0 when none
	// learns. LearnedPlanWorkers counts the workers that sum holds.
	LearnedPlan        int `json:"learned_plan"`
	LearnedPlanWorkers int `json:"learned_plan_workers"`
	// ToldPlan is, without a quota, the plan's threads as the service
	// told them to the workers (CaptchaAI's threadsinfo,
	// solver.Client.PlanTold): the plan they hold; 0 when the service
	// told none. Its workers are not in LearnedPlan.
	ToldPlan int `json:"told_plan,omitempty"`
	// ToldAccounts, when more than one, is how many accounts (API keys)
	// the workers' readings of ToldPlan are of: ToldPlan is the sum of
	// their plans, and the server sets no plan-wide quota from them
	// (Admin.FollowServicePlan); each worker holds its share of its own
	// account's plan. 0 otherwise.
	ToldAccounts int `json:"told_accounts,omitempty"`

	// Window is how far back the counts below reach; 0: everything the
	// stream keeps (its retention).
	Window time.Duration `json:"-"`
	// WindowSeconds is Window in seconds, for JSON; 0 means everything.
	WindowSeconds float64 `json:"window_seconds"`
	// Solved counts tasks solved in the window.
	Solved int `json:"solved"`
	// Dead counts tasks that died in the window.
	Dead int `json:"dead"`
	// Failed counts failed attempts that were retried in the window.
	Failed int `json:"failed_attempts"`
	// Snoozed counts attempts put off in the window because the service had
	// no free thread (no attempt spent).
	Snoozed int `json:"snoozed"`
	// ByReason counts Dead by retry.Reason.
	ByReason map[string]int `json:"dead_by_reason"`
	// DeadOverBudget counts, among Dead with reason permanent, the tasks
	// refused by a daily budget (code BUDGET_EXCEEDED): nothing was paid
	// for them, and raising the cap, not fixing the task, would solve them.
	DeadOverBudget int `json:"dead_over_budget"`
	// ByMethod breaks Solved and Dead down by task method ("unknown" when
	// the audit trail no longer names it).
	ByMethod map[string]MethodStats `json:"by_method"`
	// PerMinute is solved tasks per minute while solving: over the span
	// from the window's first solve (or its start, if earlier solves fell
	// out of it) to its last, at least a minute; 0 when none solved. It does
	// not decay while nothing runs: LastSolve says how long that has been.
	PerMinute float64 `json:"solved_per_minute"`
	// LastSolve is when the window's last solve happened; zero when none.
	LastSolve time.Time `json:"last_solve,omitzero"`
	// LastMinute counts the solves of the last minute alone.
	LastMinute int `json:"solved_last_minute"`
	// Spend is what the window's solves cost, by provider and producer,
	// when workers solve through providers; empty otherwise.
	Spend []SpendStats `json:"spend,omitempty"`
	// SpendByMethod is the same spend by provider and method (each row's
	// Method set, its Producer empty).
	SpendByMethod []SpendStats `json:"spend_by_method,omitempty"`

	// Store is the broker's store, as the server that runs it reports it
	// (SubjectStoreStatus); nil when it reports none.
	Store *StoreStatus `json:"store,omitempty"`
}

// statsEvent is the part of an Event stats reads. Method is read when an
// event carries it; otherwise the task's outcome names the method.
type statsEvent struct {
	Kind    EventKind `json:"kind"`
	At      time.Time `json:"at"`
	Seconds float64   `json:"seconds"`
	Reason  string    `json:"reason"`
	Code    string    `json:"code"`
	Method  string    `json:"method"`
	Gen     uint64    `json:"gen"`
	DelayMS int64     `json:"delay_ms"`
	Client  string    `json:"client"`
	// Provider, Cost and CostBasis are a solved outcome's.
	Provider  string  `json:"-"`
	Cost      float64 `json:"-"`
	CostBasis string  `json:"-"`
}

// Stats reads the queues from the workers' consumers, the plan quota, and
// the outcomes of the last window from the tasks' event logs (which outlive
// the tokens' outcomes), read back to the oldest task a consumer holds. In
// a paused queue it reads the waiting tasks' deadlines too.
func (c *Client) Stats(ctx context.Context, window time.Duration) (Stats, error) {
	now := c.cfg.Now()
	st := Stats{At: now, Window: window, WindowSeconds: window.Seconds(), ByReason: map[string]int{}, ByMethod: map[string]MethodStats{}}
	// oldestHeld is the submission of the oldest task a consumer holds
	// (solving, waiting out a delay, or due again in a paused lane): its
	// events are read however long ago they were written.
	var oldestHeld time.Time
	var floors []uint64 // each queue's ack floor: its messages past it wait or run
	for _, wc := range topology.WorkerConsumers() {
		name := topology.ConsumerName(wc.Lane, wc.Priority)
		info, err := c.rd.Queue(ctx, name)
		if taskstore.NoConsumer(err) {
			return st, fmt.Errorf("consumer %s: %w (create the topology first: captchaq server or captchaq init)", name, err)
		}
		if err != nil {
			return st, fmt.Errorf("consumer %s: %w", name, err)
		}
		q := QueueStats{Lane: wc.Lane, Priority: wc.Priority, Queued: info.Pending, InFlight: info.AckPending, Limit: info.MaxAckPending,
			Paused: info.Paused}
		if q.Limit > 0 && q.Limit < c.top.MaxInFlight {
			q.LaneLimit = q.Limit
		}
		if info.Paused {
			q.PausedUntil = now.Add(info.PauseRemaining)
		}
		if m := info.Waiting; m != nil {
			q.OldestQueued = max(now.Sub(m.Stored), 0)
		}
		if m := info.Held; m != nil {
			_, submitted := wire.TaskMessageGen(m.Header, m.Seq, m.Stored)
			if oldestHeld.IsZero() || submitted.Before(oldestHeld) {
				oldestHeld = submitted
			}
		}
		q.OldestQueuedSeconds = q.OldestQueued.Seconds()
		st.Queues = append(st.Queues, q)
		floors = append(floors, info.AckFloor)
		st.Queued += q.Queued
		st.InFlight += q.InFlight
		st.OldestQueued = max(st.OldestQueued, q.OldestQueued)
	}
	st.OldestQueuedSeconds = st.OldestQueued.Seconds()

	plan, err := dispatcher.ReadPlan(ctx, c.js)
	if err != nil {
		return st, err
	}
	threads := plan.Threads
	st.PlanThreads, st.PlanFromService = threads, plan.FromService

	var start time.Time // zero: everything the stream keeps
	if window > 0 {
		start = now.Add(-window)
	}
	held, err := c.countOutcomes(ctx, &st, start, oldestHeld)
	if err != nil {
		return st, err
	}
	if err := c.countHeld(ctx, &st, held); err != nil {
		return st, err
	}
	if err := c.countDeadlinesInPause(ctx, &st, held, floors); err != nil {
		return st, err
	}
	if st.Workers, err = c.Workers(ctx); err != nil {
		return st, err
	}
	for _, w := range st.Workers {
		if !w.Stopped {
			st.WorkersAlive++
			st.Threads += w.Threads
			st.ThreadsInUse += w.InUse
		}
	}
	sctx, cancel := context.WithTimeout(ctx, room.StatusTimeout)
	if store, err := ReadStoreStatus(sctx, c.nc); err == nil {
		st.Store = &store
	}
	cancel()
	if threads == 0 {
		// From the workers alive only: a stopped worker's window is
		// no part of the pool's plan.
		if err := c.learnedPlan(ctx, &st, now); err != nil {
			return st, err
		}
	}
	return st, nil
}

// Package stream is captchaq's queue on NATS JetStream: producers submit
// captchas to solve (Client), workers solve them through a solving service
// (Worker), and an admin creates the stream they share and runs it
// (Admin).
// It decides nothing about retries (package retry) and speaks no HTTP
// (package solver); it links no nats-server: stream/broker runs an
// embedded one, and stream/streamtest runs all of it inside a Go test.
//
// # Rooms
//
// The package holds three role types, one per user that docs/security.md
// defines, each with its configuration and its constructor:
//
//   - Client (ClientConfig, NewClient): the producer. It submits tasks,
//     waits for their outcomes, cancels its own tasks and reads the queue.
//   - Worker (WorkerConfig, NewWorker): takes tasks and solves them.
//   - Admin (AdminConfig, NewAdmin): creates the topology and the timings
//     bucket, sets the plan quota, pauses lanes, replays and purges dead
//     letters, and reads and cancels any task.
//
// Beside them: stream/wire, the contract every producer links (tasks,
// subjects, headers, events, outcomes and their codes), which links only
// the standard library and the method catalogue (package captcha): no NATS
// client, no HTTP; stream/broker, an embedded
// nats-server; stream/streamtest, all of it in one Go test; and
// stream/metrics, a worker's Prometheus metrics. The worker's machinery
// lives in internal packages named by role:
//
//   - stream/internal/dispatcher: which consumer to pull from, and when;
//     plan threads.
//   - stream/internal/executor: one delivery taken to its next step; what
//     it asks of the worker is one interface (executor.Hooks).
//   - stream/internal/completer: acks and erases finished deliveries.
//   - stream/internal/jscall: JetStream calls retried and paced alike.
//   - stream/internal/tracing: a task's trace context across the broker.
//   - stream/internal/upkeep: the worker's background services (the
//     heartbeat, the cancel relay, sharing what its solving client learns,
//     the waiting room's pull, the eraser), each with one start/stop
//     shape, started in order and stopped in the reverse one.
//
// What every role shares lives in four more:
//
//   - stream/internal/taskstore: every read and write of a task's
//     records, for every role: a worker's through taskstore.Store, the
//     reads of the Client's and the Admin's methods (wait, inspect, trace,
//     stats, outcomes, dead letters) through taskstore.Reader, and their
//     writes (submit, cancel, replay, purge) through taskstore.Writer, all
//     in domain types (records, acks, generation states, outcomes). The
//     role methods in this package decide; taskstore speaks JetStream.
//   - stream/internal/topology: every broker object (the stream, the token
//     stream, the workers' and the waiting room's consumers, the anchor,
//     the plan stream, the timings bucket) and the handles that find them
//     in a JetStream domain.
//   - stream/internal/room: the room a bounded stream keeps for the
//     records of every queued task, checked by producers before they
//     submit and by workers before an attempt, and the store's status.
//   - stream/internal/pool: what a worker pool shares beside the tasks
//     (Timings, Claims, Ledger, the occupancy reports).
//
// # From submit to outcome
//
// A task's path, naming the package each step lives in:
//
//  1. An admin creates the CAPTCHA stream, its token stream and the
//     workers' consumers once (Admin.EnsureTopology, in
//     stream/internal/topology; `captchaq init`).
//     Producers and workers only find them: NewClient and NewWorker fail
//     with ErrNoTopology, naming the JetStream domain they reached, rather
//     than create a second queue.
//  2. A producer submits a Task (Client.Submit, SubmitAll or Solve). The
//     task, its subject captcha.tasks.<lane>.<priority>.<id> and its
//     headers are the wire contract, in package stream/wire, which the
//     gateway, the dashboard and producers in other languages share
//     (docs/wire-contract.md). The task id is the message id, so a retried
//     submit never queues a task twice.
//  3. A worker with a free thread takes it (stream/internal/dispatcher):
//     a plan thread first when a plan-wide quota is set (Admin.SetPlan), then
//     one task per free thread (forged messages, judged by their headers,
//     in bulk and beside the threads: dispatcher.DrainBatch), high
//     priority before normal, the lanes in turn, woken by the headers the stream republishes of every task it
//     stores, listened to only while they can tell the worker something
//     (not for a consumer it already knows has tasks while every thread is
//     busy: under a backlog no wake-up reaches it per task).
//  4. The worker executes the delivery (stream/internal/executor): it
//     reads the task's state, checks the message's envelope
//     (wire.CheckEnvelope), moves a task that is not due yet (its use_at
//     less the kind's lead, its not_before) to the stream's waiting room
//     (captcha.later.>, a consumer of its own), where it holds no thread
//     and no slot of its lane until it is due, records the attempt before
//     the service hears of the captcha, has the solver.Solver solve it,
//     and records what came of it: a retry or a capacity snooze (the
//     policy of package retry), a dead letter, or the solve. Each step is decided by pure
//     functions of the state, the policy and the clock.
//  5. Every record of a task is written by compare-and-set on the last
//     sequence over the task's records (stream/internal/taskstore), so
//     whether a generation already has its outcome is decided on state no
//     producer can write, never by message-id deduplication. The solved
//     token goes to the token stream, in memory, for its lifetime; the
//     outcome on captcha.results.<id> is the record of the solve, without
//     the token.
//  6. The delivery is acked and the task message, which holds the page
//     URL, erased (stream/internal/completer).
//  7. The producer's Wait (or Solve) reads the outcome, with its token
//     while it lives, by direct gets that follow the headers the stream
//     republishes: producers need no consumer. A dead task's outcome says
//     why (ErrNotSolved); an admin can replay its dead letter
//     (Admin.Replay).
//
// Every call to JetStream that is retried (a publish, a read of a task's
// state, a scan) is retried on the same passing faults and paced by the
// same backoff (stream/internal/jscall).
//
// # Entry points and configuration
//
// Every entry point takes the *nats.Conn and finds the JetStream domain in
// the Topology (Topology.Domain): NewClient, NewWorker, NewAdmin,
// PlanThreads, OpenTimings. A connection is what a
// producer needs anyway (direct gets, the republished headers, the store's
// status are core NATS), and one value then says where the queue is,
// where a JetStream handle would carry a domain of its own that could
// disagree with the topology's.
//
// ClientConfig, WorkerConfig, AdminConfig and Topology are checked before
// anything else: a zero field takes the default its documentation names, and a
// field out of range (a negative duration, a lane that does not exist) is
// refused with an error naming it, never replaced.
//
// A Worker built with WorkerConfig.NewSolver composes what a worker needs
// around its client of the solving service: the client learns the plan's
// window only when no plan-wide quota bounds it, and what it learns (solve
// times, the plan window) is shared with the pool through TimingsBucket.
//
// # Clocks
//
// WorkerConfig.Now and ClientConfig.Now are the clock of everything
// recorded or decided on (event times, deadlines, token expiry, TTLs). The
// pacing of a process's own exchanges with the broker (lease renewals,
// cached readings, backoff, the eraser's lag) measures real elapsed time
// and uses the monotonic clock, so a test's frozen clock cannot stall them.
// Deadlines and token expiry are instants on the broker's clock, which
// every producer and worker reads from the stamps the broker puts on what
// it stores.
//
// # Integrity and room
//
// A task message is a submission of its id only if its envelope holds
// together; one that does not (forged) is never solved, and a worker
// records only a few of them, per id and per worker, ending the rest with
// an ack and no record, so that no flood of them under one id holds up the
// pool or the id's own task; tokens never reach the store's files, and finished task
// messages leave them (a delete on an encrypted store, the default, an
// erasure on a plaintext one); the stream keeps room for the records of
// every queued task, within its MaxBytes and within what the server's
// store can still take, and a worker starts no attempt it could not
// record.
package stream

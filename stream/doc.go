// Package stream is captchaq's JetStream side: the CAPTCHA stream and its
// consumers (Topology), the task and outcome wire types (Task, Outcome), the
// producer Client (Submit, Wait, Solve, dead letters, Replay, Trace, Stats),
// and the Worker pool that feeds tasks to a solver.Solver. It decides
// nothing about retries (package retry) and speaks no HTTP (package solver);
// it links no nats-server: stream/broker runs an embedded one, and
// stream/streamtest runs all of it inside a Go test.
//
// Subjects (all in one stream, CAPTCHA, which stores these and nothing else
// under captcha., but for the tokens):
//
//	captcha.tasks.<lane>.<priority>.<id>  a task, Nats-Msg-Id = <id>; lane fast|slow, priority high|normal
//	captcha.events.<id>                   the task's life: attempts, retries, hand-backs, the verdict
//	captcha.results.<id>                  the outcome (no token): for a solved task, the record of the solve
//	captcha.dead.<id>                     a dead letter: the original task plus headers
//	captcha.replays.<id>                  a record that a dead letter was replayed
//	captcha.cancels.<id>                  an admin's cancel of a generation (or an owner's, relayed by a worker)
//	captcha.cancels.<id>.<gen>            an owner's cancel, valid with the secret the task message's hash names
//	captcha.workers.<name>                a worker's heartbeat
//	captcha.anchor                        one message that never expires, at the head; clients ignore it
//	captcha.tokens.<id>.<gen>             in CAPTCHA_TOKENS, in memory: a solved outcome with its token, until it expires
//
// Where things are: worker.go runs the pool (Run: free threads, plan
// threads, shutdown); dispatch.go picks up tasks (which consumer to ask,
// when); execute.go executes one delivery (type delivery: resume, admit,
// attempt, solve), reading it with envelope.go and deciding each step with
// the pure functions of decide.go; record.go reads and writes a task's
// records by compare-and-set; outcome.go writes the end of a generation
// (outcome, dead letter, ack) and token.go the token; erase.go and room.go keep the store clean and
// bounded; client.go submits and wait.go waits; topology.go, plan.go and
// subjects.go are the stream's shape.
//
// Clocks: WorkerConfig.Now and ClientConfig.Now are the clock of everything
// recorded or decided on (event times, deadlines, token expiry, TTLs). The
// pacing of a process's own exchanges with the broker (lease renewals,
// cached readings, backoff, the eraser's lag) measures real elapsed time
// and uses the monotonic clock, so a test's frozen clock cannot stall them.
//
// Integrity: every record a worker writes for a task expects the last
// sequence over captcha.*.<id> (the task's records, which producers cannot
// write), so whether a generation already has its outcome is decided by
// compare-and-set, never by message-id deduplication (record.go). A task
// message is a submission of its id only if its envelope holds together
// (wire.CheckEnvelope); tokens never reach the store's files (token.go), and
// finished task messages leave them (erase.go: a delete on an encrypted
// store, the default, an erasure on a plaintext one); the stream keeps room
// for the records of every queued task, within its MaxBytes and within what
// the server's store can still take (room.go, store.go).
//
// The stream republishes the headers of everything it stores to
// captcha.stored.<the rest of its subject>: producers read with direct gets
// and follow those headers, without consumers (read.go).
//
// Producers in other languages need only a NATS client: they publish a task
// JSON on its task subject and read its outcome JSON from captcha.results.<id>
// (docs/wire-contract.md; contract_test.go keeps the two
// in step).
package stream

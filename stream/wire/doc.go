// Package wire is captchaq's wire contract, with no I/O: what producers,
// workers, the gateway and the dashboard write and read on the CAPTCHA
// stream. The task (Task, Params, Priority, Lane), its outcome (Outcome),
// the events of its life (Event), its dead letter (DeadLetter, Replay), a
// cancel (CancelRecord), a worker's heartbeat (WorkerInfo), the subjects
// and headers they travel on, and the checks a task message's envelope must
// pass (CheckEnvelope). docs/wire-contract.md describes the same contract
// for producers in other languages; package stream's contract tests keep
// the two in step.
//
// Fields may be added to these types; the ones here keep their names and
// meaning.
package wire

// Package stream is captchaq's JetStream side: the CAPTCHA stream and its
// consumers (Topology), the task and outcome wire types (Task, Outcome), the
// producer Client (Submit, Wait, Solve, dead letters, Replay, Trace, Stats),
// the Worker pool that feeds tasks to a solver.Solver, and an embedded
// nats-server (StartServer). It decides nothing about retries (package retry)
// and speaks no HTTP (package solver); stream/streamtest runs all of it inside
// a Go test.
//
// Subjects (all in one stream, CAPTCHA, on captcha.>):
//
//	captcha.tasks.<lane>.<priority>.<id>  a task, Nats-Msg-Id = <id>
//	captcha.events.<id>                   the task's life: attempts, retries, outcome (no token)
//	captcha.results.<id>                  the outcome; a solved one carries the token and a TTL
//	captcha.dead.<id>                     a dead letter: the original task plus headers
//	captcha.replays.<id>                  a record that a dead letter was replayed
//	captcha.anchor                        one message that never expires, at the head; clients ignore it
//
// Producers in other languages need only a NATS client: they publish a task
// JSON on its task subject and read its outcome JSON from captcha.results.<id>
// (README, "Wire contract (other languages)"; contract_test.go keeps the two
// in step).
package stream

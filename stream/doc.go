// Package stream is captchaq's JetStream side: the CAPTCHA stream and its
// consumers (topology), the task and outcome wire types, the producer client
// (Submit, Wait, Solve), the worker pool that feeds tasks to a solver, the dead
// letter with replay, and the audit trail of each task.
//
// Subjects (all in one stream, CAPTCHA, on captcha.>):
//
//	captcha.tasks.<lane>.<priority>.<id>  a task, Nats-Msg-Id = <id>
//	captcha.events.<id>                   the task's life: attempts, retries, outcome (no token)
//	captcha.results.<id>                  the outcome; a solved one carries the token and a TTL
//	captcha.dead.<id>                     a dead letter: the original task plus headers
//	captcha.replays.<id>                  a record that a dead letter was replayed
package stream

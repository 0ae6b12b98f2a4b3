// Package gateway serves the solving services' own HTTP APIs in front of
// captchaq, so that a script or SDK written for a service becomes a
// captchaq producer by changing its base URL and its key: in.php and
// res.php (the CaptchaAI and 2captcha dialect, package classic), and the
// JSON task dialect of Anti-Captcha, CapMonster Cloud, CapSolver and
// 2captcha's API v2 (createTask, getTaskResult, …: package createtask).
// Both go through the same admission, keys, limits, submission (enqueue),
// task state and reports; a task created in one dialect answers in the
// other too.
//
// The gateway is a producer like any other: it holds producer credentials,
// submits with stream.Client (one per gateway key, named after the key's
// producer, so the dashboard and `captchaq trace` show whose task it is) and
// reads outcomes the way every producer does. The solving service's key
// never reaches it: only the workers have it.
//
// # Ids
//
// in.php answers a number of 18 digits, as the service answers its own
// (digits only: scripts that keep the id as a number keep working). The
// task's captchaq id is the caller's producer name, "-", and that number, so
// an id means nothing under another key: a poll of someone else's id finds
// no task of the caller's and is answered ERROR_WRONG_CAPTCHA_ID, the
// service's answer to an id that is not yours. The generation the
// submission got (its stream sequence) is kept with the task while the
// gateway runs; the first outcome stored after it is that generation's
// (a replay's outcome can only come after the dead letter that ends it).
// A task the gateway no longer holds in memory (after a restart) is read
// as any producer reads it, by id: its latest generation, which is a
// replay's if an operator replayed it from the dead letter.
//
// # State
//
// res.php answers from memory while the gateway knows the task: a poll of a
// task that is not done costs no broker call. The outcomes come from one
// follower of the stream's outcomes (stream.Client.OutcomesSince), not one
// waiter per task. After a restart the gateway still answers for every task
// the stream keeps (stream.Client.TaskOf, then Wait), but pingbacks of tasks
// submitted before the restart are not sent, and each key's count of tasks
// in flight starts again from zero.
package gateway

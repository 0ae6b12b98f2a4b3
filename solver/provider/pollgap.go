// What each JSON provider publishes about how often its getTaskResult may
// be asked: the least gap from a reply to the next call of its task that the
// TasksClient keeps, beside the learned schedule's own spacing.

package provider

import (
	"net/url"
	"strings"
	"time"
)

// pollGaps are the providers' published paces, by API host. Each
// provider's first wait is advice on when answers come, which the learned
// schedule finds out for itself; the gap between two calls of a task is
// held to the provider's word:
//
//   - Anti-Captcha: its official SDK waits 5 s before the first
//     getTaskResult and then 2 s between calls (anti-captcha/anticaptcha-npm,
//     index.js: firstAttemptWaitingInterval 5, normalWaitingInterval 2),
//     as does its own integration guide's loop ("sleep(5) # give workers
//     a head start", then "sleep(2)": anti-captcha.com/llms-full.txt).
//   - CapSolver: a task still processing is asked again "after 3 seconds"
//     (docs.capsolver.com/guide/api-gettaskresult, response notes; the
//     zh page: 请在 3 秒后重试), at most 120 times, within 5 minutes.
//   - 2captcha API v2: "Wait at least 5 seconds and repeat the request"
//     (2captcha.com/api-docs/get-task-result, In progress).
//   - CapMonster Cloud publishes no pace, only "Limit: 120 requests per
//     task" (docs.capmonster.cloud/docs/api/methods/get-task-result/); its
//     official SDK polls images every 200 ms and reCAPTCHA every 3 s after
//     7 s (ZennoLab/capmonstercloud-client-go, pkg/client/timings.go): no
//     gap beyond the schedule's.
//
// The schedule spends at most solver.DefaultMaxCalls (20) calls on its
// plan; a task still processing after it is asked every poll interval
// (5 s), up to MaxTaskCalls calls in all, or until the caller's context
// ends.
var pollGaps = map[string]time.Duration{
	"api.anti-captcha.com": 2 * time.Second,
	"api.capsolver.com":    3 * time.Second,
	"api.2captcha.com":     5 * time.Second,
}

// MaxTaskCalls is the most getTaskResult calls a TasksClient makes of one
// task; a task still processing after them ends its solve with
// solver.CodePollLimit. It is the limit the providers that publish one
// publish:
//
//   - CapSolver: "The maximum number of query requests for each task is
//     120. When the number of query requests exceeds, the task results
//     will be lost" (docs.capsolver.com/guide/api-gettaskresult; the same
//     page keeps a task "within 5 minutes after it is created").
//   - CapMonster Cloud: "Limit: 120 requests per task. If the limit is
//     exceeded, the user's account may be temporarily locked"
//     (docs.capmonster.cloud/docs/api/methods/get-task-result/); a ban
//     of 10 minutes (docs.capmonster.cloud/docs/api/block-reason/: "when
//     exceeding the limit of the 120 requests per task").
//
// It holds for every host, those that publish no limit too (Anti-Captcha,
// 2captcha API v2, the gateway, an emulator). A task asked that many
// times has been processing for over eight minutes (100 calls at least
// past the plan, every poll interval, 5 s): past every kind's local
// deadline (captcha.MaxWait, 3 minutes at most) and CapSolver's five
// minutes, so an answer, if one came, would be too old to use, while
// asking on spends calls on a task that is lost; Anti-Captcha bans the
// IPs, and suspends the accounts, that repeat requests to no purpose
// (anti-captcha.com/apidoc/errors, its preamble).
const MaxTaskCalls = 120

// PollGap is the least time from a getTaskResult reply to the next call of its task
// that the provider at baseURL publishes (see pollGaps), 0 for a host
// that publishes none or that captchaq does not know (an emulator, the
// gateway).
func PollGap(baseURL string) time.Duration {
	u, err := url.Parse(baseURL)
	if err != nil {
		return 0
	}
	return pollGaps[strings.ToLower(u.Hostname())]
}

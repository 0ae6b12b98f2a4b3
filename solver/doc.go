// Package solver talks HTTP to a 2captcha-compatible solving service
// (CaptchaAI: in.php to submit, res.php to poll). It turns every reply into an
// Answer or a typed *Error that keeps the API's code and its retry.Class, and
// validates each method's parameters for producers and workers alike.
//
// # Adaptive polling
//
// Every fetched answer tells the client that the captcha became ready within
// (lo, hi]: after the last res.php call that said CAPCHA_NOT_READY (or the
// submission) and before the call that returned it. The poller keeps the last
// learnWindow such intervals per kind and fits a log-normal distribution of
// solve times to them (see schedule.FitLogNormal).
//
// An answer found at a captcha's first poll is left-censored, (0, hi]: it
// says the solve took at most hi, not how much less. The fit takes it as
// that (its expectation step truncates the distribution above hi), so such
// answers pull the fitted mass below hi but cannot say where. Probes say
// where: while fewer than probeNeed of a kind's recent answers came after a
// CAPCHA_NOT_READY, one captcha in probeEvery polls once more, at half the
// tightest bound seen (probeAt). Each probe halves what is known or brackets
// the ready time, so a service or a kind faster than the schedule assumes
// is found after a few dozen answers, and a kind that is not stops being
// probed; a probe is one call more for that captcha, within MaxCalls.
//
// Until a kind is learned (minLearned answers, the Client's or the pool's),
// its captchas are polled on the fixed schedule, and each first climbs a
// ladder of early polls at halves of its first poll (coldLadder): at most
// five calls more, none earlier than a quarter of Resolution nor before the
// time by which every answer of the kind seen so far was still being
// solved. A fresh Client on a service far faster than the documented first
// polls picks up its very first answers within about their own solve time,
// and those answers, bounded on both sides, plan the kind's schedule; a
// kind slower than its first poll stops paying for the ladder with its
// first answers.
//
// A log-normal suits solve times with a long right tail, and its two
// parameters cannot chase the accidents of a small sample. Ready times
// bounded on both sides (every captcha of a kind answered within 15–60 s)
// it fits badly: it puts mass far beyond the slowest answer, where the
// schedule then spends its calls, and none of the schedules it allows beats
// the fixed one. So the schedule is planned for the shape the answers show
// (shaped) when that predicts them better: with at least shapeMin answers,
// 4-fold cross-validation scores the log-normal fit and the answers'
// self-consistent estimate (each answer spread over its window in
// proportion to the estimate, repeated; smoothed over a few grid cells;
// the fit counting as one answer, or as what the pool learned) by the
// log-likelihood of the held-out windows, and the estimate is used only
// when it scores higher by shapeMargin. Where the log-normal fits, the
// schedule is planned for it.
//
// Given that distribution, the fixed schedule (FirstPoll, then every
// PollInterval) costs some expected number of res.php calls per captcha,
// and so does the service's own pace, a poll every PollInterval from
// submission (CaptchaAI's recommended poll frequency per task; schedule.pacedCalls).
// B is the fixed schedule's, or the larger of the two where the documented
// first poll comes after the kind's median ready time (a service faster
// than FirstPoll assumes). The
// adaptive schedule is the set of poll times, on a grid of Resolution (or,
// for a kind whose median is under four Resolutions, a quarter of the
// median, down to a quarter of Resolution: schedule.planGrid), that
// minimises the expected pickup lag (ready → fetched) among schedules whose
// expected number of calls is at most B (at least 1.1, so that a first poll
// earlier than one that finds every answer may miss a few): it polls densely
// where solves are likely and sparsely in the tail. When no schedule beats
// the fixed one's lag at that cost, it takes the one with the fewest calls
// at no more lag. It is found by dynamic programming on the
// Lagrangian lag + λ·calls (the optimal-inspection problem), bisecting λ until
// the calls fit the budget, and is used only when its expected lag beats the
// fixed schedule's. It plans no polls beyond the distribution's 99.9th
// percentile: after its last planned poll it continues with the fixed
// interval, so solves slower than any seen are still fetched and learned.
//
// A captcha in.php accepted is paid for, so polling never gives it up for
// the service's silence: a poll refused, timed out, answered 5xx, an HTML
// page or garbage, or asked to slow down, says nothing about the captcha,
// and it is polled again, on its schedule and then, once the schedule is
// spent, on a backoff from twice the poll interval up to six intervals,
// until the service answers about it, says it does not know it
// (CaptchaUnknown), or the caller's context ends. WithAccepted tells the
// caller each captcha id as in.php answers, and WithHeld when its polls
// start failing and when the service answers again, so that a caller can
// record them; Request.CaptchaID resumes polling a captcha accepted
// earlier, by this process or one that died, and submits anew only when
// the service no longer knows it.
//
// What a Client learned can outlive it and be shared by a pool
// (Client.ShareTimings with a TimingStore): a compact summary per kind
// (Learned: median, spread, how many answers), merged by the store and
// pooled with each Client's own answers.
//
// # Threads handed back
//
// The service frees a plan thread when it has solved a captcha, not when the
// client fetches the answer: between the two the thread is paid and idle.
// A Client estimates how many of its captchas the service is still solving
// and hands threads back (WithProbablyReady for the caller's thread, and
// its own plan window) so that the next captcha goes to the service about
// when a thread frees there (ready.go).
//
// Every BatchGap / 20 (50 ms; 10 µs more per captcha in flight beyond
// 5 000, at most BatchGap / 5), each captcha in flight has a chance S of still
// being solved: the survival of its kind's ready times at its age, given
// that it was not ready at its last CAPCHA_NOT_READY (the kind's own
// answers where they say enough, the fit beyond; 1 where neither allows
// a captcha still being solved, since one was just seen). An answer seen after a
// CAPCHA_NOT_READY counts as ready evenly over its window; one found at its
// captcha's first poll, which says only "ready by then", as the answers
// with both bounds say (the fit where they say nothing, evenly when no
// answer with both bounds informs the fit either), so that a kind
// never answered within 5 s does not count a captcha 3 s old as done.
// About E = ΣS of them are still being solved, give or take σ = √ΣS(1−S);
// of the n that still hold threads, n − E − z·σ (rounded) are then probably
// free at the service, and that many holders, the likeliest done first,
// hand theirs back. z grows at every plan-full refusal at
// in.php (a thread was not free after all; the refused Solve then holds its
// thread until an answer comes or BatchGap passes) and shrinks a little
// with each accepted submission, so refusals stay a small share of in.php
// calls (about zDown/zUp, 5 %) while threads come back as early as they allow.
// When the margin is what keeps a thread (n − E ≥ ½ but none handed back),
// the Client asks instead of waiting: its captcha likeliest done (lowest S,
// handed back or not, among those with a poll left before their last)
// makes its next scheduled poll at once, in place of that poll, so no
// captcha makes more res.php calls than its schedule plans; its last poll
// keeps its time, and after a confirming poll that failed (HTTP 5xx or
// 429) it is not asked again before the time of the poll it took, so its
// failures come no faster than its schedule's. Its last six polls
// (confirmKeep) it spends on confirms at most once a poll interval: a
// straggler asked at every decision would spend them within seconds and
// then wait for its last poll at the end of MaxWait. At most one such poll is in flight
// per Client, and one is asked at most per decision. An answer frees the
// thread for certain and is picked up early; CAPCHA_NOT_READY raises the
// captcha's lower bound, so E and σ shrink. The calls per solve rise (a poll
// made early finds the captcha not ready more often, and the later polls
// then follow), within each captcha's schedule. In a pool, a client also
// asks when the pool's Σ(n − E) is half a thread or more and no other
// client reports more of it (Occupancy.Ready): five clients of three
// threads each are rarely half a thread sure alone. These early polls keep
// to a budget: a Client's res.php calls, planned and early, stay within
// Timing.PollPace (by default its Service's multiple: 3 on CaptchaAI, 1 on
// 2captcha) times a poll every PollInterval per captcha in flight; the
// planned polls are never held back, and a res.php call refused for its
// rate stops the early ones for a minute.
// Kinds not learned yet count as still being solved. Clients of several
// workers on one plan (Client.JoinPool) keep one margin between them: the
// threads free pool-wide are Σn − ΣE − z·√ΣV, and each client keeps its
// share z·V/√ΣV of that margin, from the variances the others report, where
// each alone would keep z·√V; the pool's free threads are rounded once and
// go one by one to the client with the largest share left.
//
// # The plan window
//
// A plan whose size nobody told (Config.LearnPlan) is found the way TCP
// finds a path's capacity (window.go): a Client keeps at most limit of its
// captchas on the service's threads (submitted, neither answered nor
// handed back), and learns limit from in.php's answers. Each accepted
// submission adds 1 (slow start: the limit doubles every round) until the
// first plan-full refusal, then 1/limit, at most 1/8 (one per round for a
// window of 8 or more, limit/8 per round below, so that the small windows
// several workers on one plan find are not refused a quarter of the
// time); a refusal
// multiplies it by windowDecrease (from what was held, in slow start), at
// most once per round: a refusal of a submission admitted before the last
// decrease says nothing new. Clients of several workers on one key each
// find a share, as TCP flows do; the sum is the plan. A caller that takes
// work for the window (a worker fetching tasks) claims room in it first
// (Client.ClaimPlanRoom) and takes no more than it got: each claim goes with
// the Solve whose context carries it (WithPlanClaim), or back with Release
// when its work ends without one, so work the window has no room for stays
// with whoever has.
//
// # Batch polling
//
// res.php answers for many captchas in one call: action=get&ids=<id>,<id>,…
// (at most maxBatch) returns their states in the order asked, joined by "|":
// an answer, CAPCHA_NOT_READY or an error code each. One such call costs the
// service and the key's request limits what one single poll does, so a Client
// with several captchas in flight polls them together.
//
// The budget is that of single polling: every captcha keeps its poll schedule
// (fixed or adaptive), and each poll it would have made earns the Client one
// res.php call instead of being made. A batcher spends the earned calls on
// batch calls at most one per BatchGap, each asking about every captcha in
// flight (the maxBatch least recently asked when there are more). A Client
// with one captcha in flight therefore polls exactly as before; with n in
// flight, calls come up to n times as often and each finds every ready
// answer, so the pickup lag falls from about half a poll interval to about
// half of BatchGap, while the calls per solve fall once n calls a poll
// interval exceed one per BatchGap. Unspent calls beyond a burst of two are
// dropped: that is the saving.
//
// A batch reply is split on "|", so it carries only answers that cannot hold
// one and need nothing beside the text: reCAPTCHA tokens, image text, grid
// cells. Those are taken from it. A Turnstile captcha it finds ready is then
// fetched on its own with action=get&id, for the useragent the batch reply
// drops; so is a captcha for which it names an error code, so that the code
// is classified on the path it has always taken. Such a fetch is not charged
// to the budget: it returns an answer or a final code, never
// CAPCHA_NOT_READY, and the budget bounds the asking (charging it made the
// budget shrink as batching found answers sooner, before the polls that
// would have earned it). GeeTest answers hold a "|" (seccode "…|jordan"), so
// GeeTest captchas are polled on their own. A captcha's last scheduled poll
// is always its own, so giving up (CodePollLimit, CodeTimeout) means what it
// meant without batching.
//
// When a batch call fails (network, HTTP 5xx or 429, an HTML page, a busy
// code such as ERROR_TOO_MUCH_REQUESTS) or its reply is not one state per id,
// every captcha it asked about makes its next scheduled poll on its own: no
// captcha depends on batch calls working, failures in a row are counted on
// its own polls as without batching, and nothing is fetched at once in a
// burst. A service that does not answer batch calls (two replies that are not
// one state per id — ERROR_WRONG_CAPTCHA_ID for the missing id, a gateway's
// 404 — before any that was) gets single polling from then on, with a warning
// in the log; once one batch reply was read, such a reply is taken for an
// answer that held a "|" after all. A batch reply with a code that refuses
// the key (ERROR_WRONG_USER_KEY, IP_BANNED) ends every solve it asked about,
// each with an error of its own naming its captcha.
package solver

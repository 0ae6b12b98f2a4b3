// Package provider puts several solving services behind one
// solver.Solver: a Set of providers, each a solver.Client of its own
// service and key, chosen per task and per attempt by its role, and
// priced per solve.
//
// It sits beside package solver because it is one: a Set is what a
// worker solves with (stream.WorkerConfig.Solver), and it talks to the
// services only through solver.Clients.
//
// # Routing
//
// A task goes to the primaries that solve its method, in the file's
// order; to a fallback only while every one of them is out. A provider
// is out while its Client reports an outage (solver.Client.Unreachable:
// refused connections, no reply, a run of HTTP 5xx), and for
// Config.OutFor after it refused the key or had no funds (a Fatal code):
// a Set stops a worker only when every provider of a method refused it.
// A submission a provider did not take (not accepted, its reply not lost)
// goes on to the next provider at once, so nothing is paid twice: a
// submission whose reply was lost (solver.MayBePaid) may have been paid,
// and is returned to the caller instead of being sent elsewhere.
//
// A captcha a provider accepted stays with it: it is paid there. The
// Accepted news a Set tells its caller (solver.WithAccepted) names the
// provider, and a Request that resumes a captcha (Request.CaptchaID)
// names it back (Request.Provider): the Set polls that provider only,
// through an outage if it must, as a single Client does.
//
// # What a solve cost
//
// An Answer names its provider and its cost: a per-solve provider's
// stated price of the method (Billing.Per1000 / 1000), and 0 on a thread
// plan, whose price is paid by the month whatever is solved (CostPlan).
package provider

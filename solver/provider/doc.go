// Package provider puts several solving services behind one
// solver.Solver: a Set of providers, each a client of its own service and
// key (a solver.Client for the classic in.php/res.php dialect, a
// TasksClient for the JSON createTask one), chosen per task and per
// attempt by its role, and priced per solve.
//
// It sits beside package solver because it is one: a Set is what a
// worker solves with (stream.WorkerConfig.Solver), and it talks to the
// services only through its clients. The providers file (File, Load) says
// which services, how each is reached and paid, and what it is for.
//
// # Routing
//
// A task goes to the primaries that solve its method, in the file's
// order; to a fallback only while every one of them is out. A provider
// is out while its client reports an outage (Client.Unreachable: refused
// connections, no reply, a run of HTTP 5xx), when its in.php answers 5xx,
// and for Config.OutFor after it refused the key or had no funds (a Fatal
// code): a Set stops a worker only when every provider of a method
// refused it. A submission a provider did not take goes on to the next
// provider at once; one whose reply was lost (solver.MayBePaid, or a
// createTask sent and not answered) may have been paid, and goes back to
// the caller instead of elsewhere.
//
// A captcha a provider accepted stays with it: it is paid there. The
// Accepted news a Set tells its caller (solver.WithAccepted) names the
// provider, and a Request that resumes a captcha (Request.CaptchaID)
// names it back (Request.Provider): the Set polls that provider only,
// through an outage if it must, as a single Client does. A worker frees
// the thread of a captcha its provider holds in silence
// (Set.SolvesElsewhere), so that the next task goes elsewhere.
//
// Past the plan (overflow.go): a task that finds every primary's plan
// full waits for a thread, a capacity wait that pays nothing, unless
// waiting would miss its deadline (WaitForPlan); then the cheapest
// overflow provider takes it (Config.Overflow). A per-solve primary
// without free workers is no plan: a task that cannot wait for them, and
// that no overflow provider took, goes to the fallbacks.
//
// # Worker threads
//
// A worker's threads are sized for the thread plan: a captcha on a plan
// holds one, as it holds a thread of the plan. A per-solve provider counts
// no threads, so a captcha it accepted gives the worker's thread and plan
// thread to the next task (solver.Detach) and is polled beside them, up
// to the provider's Entry.MaxInFlight per Set; past that it keeps its
// thread. A fallback that takes over from a plan is then not held to the
// plan's thread count.
//
// # What a solve cost
//
// An Answer names its provider and its cost: the cost a tasks provider
// reported (CostReported), else a per-solve provider's stated price of the
// method (Billing.Per1000 / 1000, CostPrice), and 0 on a thread plan,
// whose price is paid by the month whatever is solved (CostPlan).
package provider

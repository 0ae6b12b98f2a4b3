// Package schedule is the solver's statistics as pure code: the log-normal
// fit of a kind's ready times (FitLogNormal), the adaptive poll schedule
// planned on it within a budget of res.php calls (PlanAdaptive), and the
// survival of a captcha not yet ready (EmpiricalSurvival). It does no I/O
// and keeps no state: package solver owns the answers observed, the locks
// and the clock, and calls it. The solver package doc says what the
// schedule is for.
package schedule

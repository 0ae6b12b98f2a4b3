package main

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/captchaq/captchaq/stream"
)

// minInterval is the shortest --interval: each snapshot reads the stream's
// recent events, and a redraw faster than the eye gains nothing.
const minInterval = 500 * time.Millisecond

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stats", "[--watch] [--json] [flags]", stdout)
	watch := fs.Bool("watch", false, "print again every --interval until interrupted: redrawn on a terminal, appended when piped")
	interval := fs.Duration("interval", 2*time.Second, "with --watch, time between snapshots (at least 500ms)")
	window := fs.Duration("window", time.Hour, "outcome counts and solve times cover this much recent time (0: all the stream keeps)")
	asJSON := fs.Bool("json", false, "print one JSON object per snapshot")
	nf := addFlags[natsFlags](fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *interval < minInterval {
		return usageError("--interval %s: at least %s (each snapshot reads the stream)", *interval, minInterval)
	}
	if *window < 0 {
		return usageError("--window %s: want 0 (all) or a positive duration", *window)
	}
	// fctx ends as soon as the server refuses an operation; ctx, with
	// --watch, when the user interrupts.
	return nf.withSession(ctx, "captchaq-stats", stream.ClientConfig{}, func(fctx context.Context, c *stream.Client, ae *asyncErrors) error {
		redraw := *watch && !*asJSON && isTerminal(stdout)
		for n := 0; ; n++ {
			st, err := c.Stats(fctx, *window)
			if err != nil {
				if *watch && ctx.Err() != nil {
					return nil
				}
				return explain(err, ae)
			}
			switch {
			case *asJSON:
				_ = json.NewEncoder(stdout).Encode(st)
			case redraw:
				var b strings.Builder
				printStats(&b, st)
				// Home, the snapshot, then clear what an older, longer one left.
				fmt.Fprint(stdout, "\x1b[H\x1b[2J"+b.String())
			default:
				if n > 0 {
					fmt.Fprintln(stdout)
				}
				printStats(stdout, st)
			}
			if !*watch {
				return nil
			}
			select {
			case <-ctx.Done():
				return nil
			case <-time.After(*interval):
			}
		}
	})
}

// isTerminal reports whether w is a terminal (a character device).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

func printStats(w io.Writer, st stream.Stats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\nLANE\tPRIORITY\tQUEUED\tSOLVING\tRETRYING\tLIMIT\tOLDEST QUEUED\tSTATE\n", st.At.UTC().Format(time.RFC3339))
	for _, q := range st.Queues {
		limit := "no limit"
		if q.LaneLimit > 0 {
			limit = fmt.Sprint(q.LaneLimit)
		}
		state := "taking tasks"
		if q.Paused {
			state = "paused until " + q.PausedUntil.UTC().Format(time.RFC3339)
			if q.PausedUntil.Sub(st.At) > 50*365*24*time.Hour {
				state = "paused"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%s\t%s\n", q.Lane, q.Priority, q.Queued, q.Solving, q.Retrying, limit, age(q.OldestQueued), state)
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t%d\t\t%s\t\n", st.Queued, st.Solving, st.Retrying, age(st.OldestQueued))
	printDeadlineWarnings(tw, st)
	plan, byService := st.PlanThreads, st.PlanFromService
	if plan == 0 && st.ToldPlan > 0 {
		plan, byService = st.ToldPlan, true
	}
	if plan > 0 {
		by := ""
		switch {
		case byService && st.ToldAccounts > 1:
			by = fmt.Sprintf(", told by the service for %d accounts (threadsinfo): no plan-wide quota, the workers' API keys differ and each worker holds its share of its own account's plan", st.ToldAccounts)
		case byService:
			by = ", told by the service (threadsinfo; captchaq init --plan-threads overrides it)"
		}
		fmt.Fprintf(tw, "\nsolving now: %d of %d plan threads (%.0f%%)%s\n", st.Solving, plan, 100*float64(st.Solving)/float64(plan), by)
	} else {
		fmt.Fprintf(tw, "\nsolving now: %d (no plan-wide thread quota: each worker's --threads caps its own)\n", st.Solving)
		if st.LearnedPlan > 0 {
			fmt.Fprintf(tw, "learned plan: about %d threads (the plan windows of %d workers, from the service's capacity refusals); "+
				"set it: captchaq init --plan-threads %d\n", st.LearnedPlan, st.LearnedPlanWorkers, st.LearnedPlan)
		} else if st.WorkersAlive > 0 {
			fmt.Fprintf(tw, "plan never reached: no worker alive has seen the service refuse a submission for want of threads, so there is no plan size to suggest\n")
		}
	}
	printStore(tw, st.Store)
	fmt.Fprintf(tw, "waiting to retry: %d (held for a later delivery, at no worker)\n", st.Retrying)
	fmt.Fprintf(tw, "workers alive: %d", st.WorkersAlive)
	if st.WorkersAlive > 0 {
		fmt.Fprintf(tw, ", %d of %d threads in use", st.ThreadsInUse, st.Threads)
	}
	if stopped := len(st.Workers) - st.WorkersAlive; stopped > 0 {
		fmt.Fprintf(tw, " (%d stopped in the last %s)", stopped, stream.HeartbeatTTL)
	}
	fmt.Fprintln(tw)
	for _, x := range st.Workers {
		if s := x.ServiceState(); s != "" && !x.Stopped {
			fmt.Fprintf(tw, "  %s: %s\n", x.Name, s)
		}
	}
	win := "all retained"
	if st.Window > 0 {
		win = "last " + st.Window.String()
	}
	fmt.Fprintf(tw, "%s: solved %d, dead %d, failed attempts %d (retried), snoozed %d\n", win, st.Solved, st.Dead, st.Failed, st.Snoozed)
	if st.Solved > 0 {
		fmt.Fprintf(tw, "throughput: %.1f solved/min while solving, %d in the last minute, last solve %s ago\n",
			st.PerMinute, st.LastMinute, age(max(st.At.Sub(st.LastSolve), time.Millisecond)))
	}
	reasons := make([]string, 0, len(st.ByReason))
	for r := range st.ByReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(tw, "  dead %s: %d\n", r, st.ByReason[r])
		if r == "permanent" && st.DeadOverBudget > 0 {
			fmt.Fprintf(tw, "    of them over a budget (BUDGET_EXCEEDED): %d\n", st.DeadOverBudget)
		}
	}
	methods := make([]string, 0, len(st.ByMethod))
	for m := range st.ByMethod {
		methods = append(methods, m)
	}
	sort.Strings(methods)
	if len(methods) > 0 {
		fmt.Fprintln(tw, "\nMETHOD\tSOLVED\tDEAD\tP50\tP95")
	}
	for _, m := range methods {
		s := st.ByMethod[m]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1fs\t%.1fs\n", m, s.Solved, s.Dead, s.P50, s.P95)
	}
	printSpend(tw, st)
	_ = tw.Flush()
}

// printSpend is the spend table: what each provider was paid for each
// producer's solves, with totals per provider; then the same by provider
// and method.
func printSpend(w io.Writer, st stream.Stats) {
	rows := st.Spend
	if len(rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\nPROVIDER\tPRODUCER\tSOLVED\tON PLAN\tCOST")
	total := map[string]stream.SpendStats{}
	var order []string
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", r.Provider, cmp.Or(r.Producer, "(unnamed)"), r.Solves, r.PlanSolves, money(r.Cost))
		t, seen := total[r.Provider]
		if !seen {
			order = append(order, r.Provider)
		}
		t.Solves, t.PlanSolves, t.Cost = t.Solves+r.Solves, t.PlanSolves+r.PlanSolves, t.Cost+r.Cost
		total[r.Provider] = t
	}
	for _, p := range order {
		t := total[p]
		fmt.Fprintf(w, "%s\ttotal\t%d\t%d\t%s\n", p, t.Solves, t.PlanSolves, money(t.Cost))
	}
	if len(st.SpendByMethod) > 0 {
		fmt.Fprintln(w, "\nPROVIDER\tMETHOD\tSOLVED\tON PLAN\tCOST")
	}
	for _, r := range st.SpendByMethod {
		fmt.Fprintf(w, "%s\t%s\t%d\t%d\t%s\n", r.Provider, r.Method, r.Solves, r.PlanSolves, money(r.Cost))
	}
}

// money is an amount to a millionth, without trailing zeros: the prices
// per solve are fractions of a cent.
func money(x float64) string {
	return strconv.FormatFloat(math.Round(x*1e6)/1e6, 'f', -1, 64)
}

// printDeadlineWarnings says, for each paused lane whose waiting tasks'
// deadlines fall before the pause ends, how many and when the first
// passes: each ends dead with DEADLINE_PASSED when it is next taken.
func printDeadlineWarnings(w io.Writer, st stream.Stats) {
	type atRisk struct {
		n     int
		first time.Time
	}
	var lanes []stream.Lane
	risk := map[stream.Lane]atRisk{}
	for _, q := range st.Queues {
		if q.DeadlinesInPause == 0 {
			continue
		}
		r, seen := risk[q.Lane]
		if !seen {
			lanes = append(lanes, q.Lane)
		}
		r.n += q.DeadlinesInPause
		if r.first.IsZero() || q.FirstDeadline.Before(r.first) {
			r.first = q.FirstDeadline
		}
		risk[q.Lane] = r
	}
	for _, lane := range lanes {
		r := risk[lane]
		if !r.first.After(st.At) {
			// Resuming cannot save a task whose deadline has passed:
			// say so, instead of promising it.
			fmt.Fprintf(w, "warning: lane %s is paused with %d waiting tasks whose deadline passes before the pause ends (the first passed at %s, %s ago): a task past its deadline ends dead with DEADLINE_PASSED, resumed or not; `captchaq lane resume %s` saves only those whose deadline is still ahead\n",
				lane, r.n, r.first.UTC().Format(time.RFC3339), age(max(st.At.Sub(r.first), time.Millisecond)), lane)
			continue
		}
		fmt.Fprintf(w, "warning: lane %s is paused with %d waiting tasks whose deadline passes before the pause ends (the first passes at %s, in %s): they end dead with DEADLINE_PASSED unless `captchaq lane resume %s` comes first\n",
			lane, r.n, r.first.UTC().Format(time.RFC3339), age(r.first.Sub(st.At)), lane)
	}
}

// age prints a queue age, "-" when nothing waits.
func age(d time.Duration) string {
	if d <= 0 {
		return "-"
	}
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(time.Second).String()
}

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"text/tabwriter"
	"time"

	"github.com/captchaq/captchaq/stream"
)

func runStats(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("stats", "[--watch] [--json] [flags]", stderr)
	watch := fs.Bool("watch", false, "print again every --interval until interrupted")
	interval := fs.Duration("interval", 2*time.Second, "with --watch, time between snapshots")
	window := fs.Duration("window", time.Hour, "outcome counts and solve times cover this much recent time (0: all the stream keeps)")
	asJSON := fs.Bool("json", false, "print one JSON object per snapshot")
	var nf natsFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	nc, ae, err := nf.connect(ctx, "captchaq-stats")
	if err != nil {
		return err
	}
	defer nc.Close()
	fctx, cancel := ae.failFast(ctx)
	defer cancel()
	c, err := stream.NewClient(fctx, nc, stream.ClientConfig{})
	if err != nil {
		return explain(err, ae)
	}
	for {
		st, err := c.Stats(fctx, *window)
		if err != nil {
			if *watch && ctx.Err() != nil {
				return nil
			}
			return explain(err, ae)
		}
		if *asJSON {
			_ = json.NewEncoder(stdout).Encode(st)
		} else {
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
}

func printStats(w io.Writer, st stream.Stats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\nLANE\tPRIORITY\tQUEUED\tIN FLIGHT\tLIMIT\tOLDEST QUEUED\n", st.At.UTC().Format(time.RFC3339))
	for _, q := range st.Queues {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", q.Lane, q.Priority, q.Queued, q.InFlight, q.Limit, age(q.OldestQueued))
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t\t%s\n", st.Queued, st.InFlight, age(st.OldestQueued))
	plan := "no plan quota set"
	if st.PlanThreads > 0 {
		plan = fmt.Sprintf("of %d plan threads (%.0f%%)", st.PlanThreads, 100*float64(st.Solving)/float64(st.PlanThreads))
	}
	fmt.Fprintf(tw, "\nsolving now: %d %s\n", st.Solving, plan)
	win := "all retained"
	if st.Window > 0 {
		win = "last " + st.Window.String()
	}
	fmt.Fprintf(tw, "%s: solved %d, dead %d, failed attempts %d (retried), snoozed %d\n", win, st.Solved, st.Dead, st.Failed, st.Snoozed)
	fmt.Fprintf(tw, "throughput: %.1f solved/min, %d in the last minute\n", st.PerMinute, st.LastMinute)
	reasons := make([]string, 0, len(st.ByReason))
	for r := range st.ByReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	for _, r := range reasons {
		fmt.Fprintf(tw, "  dead %s: %d\n", r, st.ByReason[r])
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
	_ = tw.Flush()
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

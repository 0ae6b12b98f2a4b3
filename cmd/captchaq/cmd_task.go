package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"text/tabwriter"
	"time"

	"github.com/captchaq/captchaq/stream"
)

var taskVerbs = []subcommand{
	{"ls", "[--lane fast|slow] [--status queued|scheduled|solving|retrying] [--method M] [--limit N] [--json]", "list the tasks that wait or run, oldest first"},
	{"show", "ID [--json]", "show where one task stands"},
	{"cancel", "ID...", "ask that tasks not be solved: each ends dead/canceled at its next delivery, without a call to the service; an attempt already at the service is not stopped"},
}

// taskArgs is how many arguments each task verb takes at most.
var taskArgs = map[string]int{"ls": 0, "show": 1, "cancel": math.MaxInt}

func runTask(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, fs, nf, args, err := verbFlagSet("task", taskVerbs, args, stdout)
	if err != nil {
		return err
	}
	var (
		lane, status, method string
		limit                int
		asJSON               bool
	)
	switch sub {
	case "ls":
		fs.StringVar(&lane, "lane", "", "only this lane: fast or slow")
		fs.StringVar(&status, "status", "", "only this status: queued, scheduled, solving or retrying")
		fs.StringVar(&method, "method", "", "only tasks of this method")
		fs.IntVar(&limit, "limit", 100, "list at most this many; 0: all (one read per task)")
		fs.BoolVar(&asJSON, "json", false, "print JSON lines")
	case "show":
		fs.BoolVar(&asJSON, "json", false, "print JSON")
	}
	if err := parseArgs(fs, args, taskArgs[sub]); err != nil {
		return err
	}
	f := stream.TaskFilter{Lane: stream.Lane(lane), Status: stream.TaskStatus(status), Method: method, Limit: limit}
	if err := checkMethodFilter(method); err != nil {
		return err
	}
	switch {
	case lane != "" && f.Lane != stream.LaneFast && f.Lane != stream.LaneSlow:
		return usageError("--lane %q: want fast or slow", lane)
	case status != "" && f.Status != stream.TaskQueued && f.Status != stream.TaskSolving && f.Status != stream.TaskRetrying && f.Status != stream.TaskScheduled:
		return usageError("--status %q: want queued, scheduled, solving or retrying", status)
	case limit < 0:
		return usageError("--limit %d: want 0 or more", limit)
	case sub == "ls" && fs.NArg() > 0:
		return usageError("task ls: unexpected argument %q", fs.Arg(0))
	case sub == "show" && fs.NArg() != 1:
		return usageError("task show: want one task id")
	case sub == "cancel" && fs.NArg() == 0:
		return usageError("task cancel: want task ids")
	}
	if sub == "cancel" {
		// Every id is checked before any task is canceled.
		if err := validateIDs(fs.Args(), "nothing canceled"); err != nil {
			return err
		}
	}
	return nf.withSession(ctx, "captchaq-task", stream.ClientConfig{Name: "captchaq-task-" + sub}, func(ctx context.Context, c *stream.Client, ae *asyncErrors) error {
		enc := json.NewEncoder(stdout)
		switch sub {
		case "ls":
			ts, err := c.Tasks(ctx, f)
			if err != nil {
				return explain(err, ae)
			}
			if asJSON {
				for _, t := range ts {
					_ = enc.Encode(t)
				}
				return nil
			}
			printTasks(stdout, ts)
			if limit > 0 && len(ts) == limit {
				fmt.Fprintf(stdout, "(the first %d; --limit 0 lists all)\n", limit)
			}
			return nil
		case "show":
			t, err := c.TaskOf(ctx, fs.Arg(0))
			if err != nil {
				return explain(err, ae)
			}
			if asJSON {
				return enc.Encode(t)
			}
			printTasks(stdout, []stream.TaskInfo{t})
			return nil
		}
		var errs []error
		for _, id := range fs.Args() {
			t, err := c.Cancel(ctx, id, "operator")
			switch {
			case err != nil:
				errs = append(errs, explain(err, ae))
			case t.Status == stream.TaskSolving:
				fmt.Fprintf(stdout, "task %s: canceled, but its attempt is already at the service (worker %s): that answer is still stored; no retry follows\n", id, t.Worker)
			default:
				fmt.Fprintf(stdout, "task %s: canceled (was %s); it ends dead/canceled at its next delivery, without a call to the service\n", id, t.Status)
			}
		}
		return errors.Join(errs...)
	})
}

func printTasks(w io.Writer, ts []stream.TaskInfo) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tLANE\tPRIORITY\tSTATUS\tMETHOD\tHOST\tATTEMPTS\tLAST CODE\tAGE\tWORKER\tNOTE")
	now := time.Now()
	for _, t := range ts {
		note := ""
		switch {
		case t.Canceled:
			note = "canceled"
		case !t.RetryAt.IsZero():
			note = "retry in " + age(t.RetryAt.Sub(now))
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", t.ID, orDash(string(t.Lane)), orDash(string(t.Priority)), t.Status,
			orDash(t.Method), orDash(t.Host), t.Attempts, orDash(t.LastCode), age(now.Sub(t.Submitted)), orDash(t.Worker), note)
	}
	_ = tw.Flush()
}

var laneVerbs = []subcommand{
	{"pause", "fast|slow [--for D]", "workers take none of the lane's tasks (both priorities) until resumed or --for has passed; tasks already taken finish (admin)"},
	{"resume", "fast|slow", "workers take the lane's tasks again (admin)"},
}

func runLane(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, fs, nf, args, err := verbFlagSet("lane", laneVerbs, args, stdout)
	if err != nil {
		return err
	}
	var d time.Duration
	if sub == "pause" {
		fs.DurationVar(&d, "for", 0, "resume by itself after this long (default: until `captchaq lane resume`)")
	}
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("lane %s: want one lane, fast or slow", sub)
	}
	lane := stream.Lane(fs.Arg(0))
	if lane != stream.LaneFast && lane != stream.LaneSlow {
		return usageError("lane %q: want fast or slow", fs.Arg(0))
	}
	if d < 0 {
		return usageError("--for %s: want a positive duration", d)
	}
	ss, err := nf.session(ctx, "captchaq-lane", stream.ClientConfig{})
	if err != nil {
		return err
	}
	defer ss.close()
	if sub == "resume" {
		if err := ss.admin.ResumeLane(ss.ctx, lane); err != nil {
			return explain(err, ss.ae)
		}
		fmt.Fprintf(stdout, "lane %s resumed: workers take its tasks again\n", lane)
		return nil
	}
	until, what := time.Now().Add(100*365*24*time.Hour), "until `captchaq lane resume "+string(lane)+"`"
	if d > 0 {
		until = time.Now().Add(d)
		what = "until " + until.UTC().Format(time.RFC3339)
	}
	if err := ss.admin.PauseLane(ss.ctx, lane, until); err != nil {
		return explain(err, ss.ae)
	}
	fmt.Fprintf(stdout, "lane %s paused %s: its tasks queue, tasks already taken finish\n", lane, what)
	warnOfDeadlines(ss.ctx, ss.client, lane, until, d > 0, stderr)
	return nil
}

// warnOfDeadlines says on w how many of lane's waiting tasks reach their
// deadline before the pause ends (forever: whether any has one), since a
// task that waits past its deadline ends dead, not queued. A listing that
// fails says nothing: the pause itself is done.
func warnOfDeadlines(ctx context.Context, c *stream.Client, lane stream.Lane, until time.Time, bounded bool, w io.Writer) {
	ts, err := c.Tasks(ctx, stream.TaskFilter{Lane: lane})
	if err != nil {
		return
	}
	waiting, passing := 0, 0
	var first time.Time
	for _, t := range ts {
		if t.Status == stream.TaskSolving || t.Status == stream.TaskDone {
			continue
		}
		waiting++
		if t.Deadline.IsZero() || bounded && !t.Deadline.Before(until) {
			continue
		}
		passing++
		if first.IsZero() || t.Deadline.Before(first) {
			first = t.Deadline
		}
	}
	if passing == 0 {
		return
	}
	at := fmt.Sprintf("%s, in %s", first.UTC().Format(time.RFC3339), time.Until(first).Round(time.Second))
	if bounded {
		fmt.Fprintf(w, "warning: %d of %d waiting tasks of lane %s reach their deadline before the pause ends (the first at %s): they will end dead with DEADLINE_PASSED unless the lane is resumed before\n",
			passing, waiting, lane, at)
		return
	}
	fmt.Fprintf(w, "warning: %d of %d waiting tasks of lane %s have deadlines; the first passes at %s: resume the lane before then, or they end dead with DEADLINE_PASSED\n",
		passing, waiting, lane, at)
}

var workersVerbs = []subcommand{
	{"ls", "[--json]", "list the workers alive: name, threads, in use, last seen"},
}

func runWorkers(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	_, fs, nf, args, err := verbFlagSet("workers", workersVerbs, args, stdout)
	if err != nil {
		return err
	}
	asJSON := fs.Bool("json", false, "print JSON lines")
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	ss, err := nf.session(ctx, "captchaq-workers", stream.ClientConfig{})
	if err != nil {
		return err
	}
	defer ss.close()
	ws, err := ss.client.Workers(ss.ctx)
	if err != nil {
		return explain(err, ss.ae)
	}
	if *asJSON {
		enc := json.NewEncoder(stdout)
		for _, w := range ws {
			_ = enc.Encode(w)
		}
		return nil
	}
	printWorkers(stdout, ws)
	return nil
}

func printWorkers(w io.Writer, ws []stream.WorkerInfo) {
	if len(ws) == 0 {
		fmt.Fprintf(w, "no worker seen in the last %s\n", stream.HeartbeatTTL)
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKER\tHOST\tPID\tTHREADS\tIN USE\tUP\tLAST SEEN\tSTATE")
	now := time.Now()
	for _, x := range ws {
		state, inUse := "running", fmt.Sprint(x.InUse)
		if x.Stopped {
			// Its last threads may still be finishing: none takes a task.
			state, inUse = "stopped", "-"
		} else if s := x.ServiceState(); s != "" {
			state = "running; " + s
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%s\t%s ago\t%s\n", x.Name, orDash(x.Host), x.PID, x.Threads, inUse,
			age(x.At.Sub(x.Started)), age(max(now.Sub(x.At), time.Millisecond)), state)
	}
	_ = tw.Flush()
}

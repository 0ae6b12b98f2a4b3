package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

var deadVerbs = []subcommand{
	{"ls", "[--method M] [--reason R] [--since D] [--pending] [--json]", "list dead letters"},
	{"show", "ID [--json]", "show one task's latest dead letter, with its reason and detail"},
	{"replay", "ID... | --all [--method M] [--reason R] [--since D] [--dry-run] --yes [--wait]", "put dead letters back on the queue as new submissions (admin); --all lists them first and replays with --yes; --wait prints their outcomes"},
	{"purge", "ID... | --all [--method M] [--reason R] [--since D] [--dry-run] --yes", "delete the dead letters of the ids named, or every one that matches the filters (admin); --dry-run lists them"},
}

// deadArgs is how many arguments each dead verb takes at most.
var deadArgs = map[string]int{"ls": 0, "show": 1, "replay": math.MaxInt, "purge": math.MaxInt}

// deadFilterFlags are the filters dead ls, replay --all and purge share.
type deadFilterFlags struct {
	method, reason string
	since          time.Duration
	pending        bool
}

func (d *deadFilterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&d.method, "method", "", "only dead letters of this method")
	fs.StringVar(&d.reason, "reason", "", "only this reason: permanent, attempts-exhausted, invalid-task, expired, crashed, canceled")
	fs.DurationVar(&d.since, "since", 0, "only dead letters younger than this (e.g. 1h)")
}

func (d *deadFilterFlags) filter() (stream.DeadFilter, error) {
	f := stream.DeadFilter{Method: d.method, Reason: retry.Reason(d.reason), Pending: d.pending}
	if f.Reason != "" && !f.Reason.Valid() {
		return f, usageError("--reason %q: want one of %v", d.reason, retry.Reasons)
	}
	if err := checkMethodFilter(d.method); err != nil {
		return f, err
	}
	if d.since < 0 {
		return f, usageError("--since %s: want a positive duration", d.since)
	}
	if d.since > 0 {
		f.Since = time.Now().Add(-d.since)
	}
	return f, nil
}

// checkMethodFilter refuses a --method filter that can match nothing: a
// method captchaq does not solve, naming the nearest one and all of them.
func checkMethodFilter(method string) error {
	if why := captcha.NotAMethod(method); method != "" && why != "" {
		return usageError("--method %q: %s", method, why)
	}
	return nil
}

func runDead(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	sub, fs, nf, args, err := verbFlagSet("dead", deadVerbs, args, stdout)
	if err != nil {
		return err
	}
	var df deadFilterFlags
	asJSON := fs.Bool("json", false, "print JSON (one object per line)")
	all, yes, dryRun, wait := false, false, false, false
	switch sub {
	case "ls":
		df.register(fs)
		fs.BoolVar(&df.pending, "pending", false, "only dead letters not replayed yet")
	case "show":
	case "replay":
		df.register(fs)
		fs.BoolVar(&all, "all", false, "replay every dead letter that matches the filters and was not replayed yet (permanent, invalid-task and canceled letters only when --reason names them)")
		fs.BoolVar(&yes, "yes", false, "with --all or filters: really replay them (each is paid for again)")
		fs.BoolVar(&dryRun, "dry-run", false, "with --all or filters: list what would be replayed, replay nothing")
		fs.BoolVar(&wait, "wait", false, "then wait for the replayed tasks' outcomes and print them (exit 1 unless all are solved)")
	case "purge":
		df.register(fs)
		fs.BoolVar(&all, "all", false, "delete every dead letter that matches the filters (all of them without a filter)")
		fs.BoolVar(&yes, "yes", false, "really delete them")
		fs.BoolVar(&dryRun, "dry-run", false, "list what would be deleted, delete nothing")
	}
	if err := parseArgs(fs, args, deadArgs[sub]); err != nil {
		return err
	}
	f, err := df.filter()
	if err != nil {
		return err
	}
	if sub == "replay" {
		// Every id is checked before any is replayed: a typo at the end of
		// a list must not leave the ones before it queued (and paid for).
		if err := validateIDs(fs.Args(), "nothing replayed"); err != nil {
			return err
		}
	}
	return nf.withAdminSession(ctx, "captchaq-dead", stream.ClientConfig{Name: "captchaq-dead-" + sub}, func(ctx context.Context, c *stream.Client, adm *stream.Admin, ae *asyncErrors) error {
		enc := json.NewEncoder(stdout)
		switch sub {
		case "ls":
			ds, err := c.DeadLetters(ctx, f)
			if err != nil {
				return explain(err, ae)
			}
			if *asJSON {
				for _, d := range ds {
					d.Task = nil // ls is a listing; show prints the task
					_ = enc.Encode(d)
				}
				return nil
			}
			tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tMETHOD\tHOST\tREASON\tERROR\tATTEMPTS\tDEAD AT\tREPLAYED")
			for _, d := range ds {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\n", d.ID, d.Method, d.Host, d.Reason, d.Error, d.Attempts,
					d.DeadAt.UTC().Format(time.RFC3339), replayedText(d.Replayed))
			}
			return tw.Flush()
		case "show":
			if fs.NArg() != 1 {
				return usageError("dead show: want one task id")
			}
			d, err := c.DeadLetterOf(ctx, fs.Arg(0))
			if err != nil {
				return explain(noDeadLetter(fs.Arg(0), err), ae)
			}
			if *asJSON {
				return enc.Encode(d)
			}
			fmt.Fprintf(stdout, "id:            %s\nmethod:        %s\nhost:          %s\nreason:        %s\nerror:         %s\ndetail:        %s\nattempts:      %d\nsubject:       %s\nfirst failure: %s\nlast failure:  %s\ndead at:       %s\nreplayed:      %s\ndead letter:   %d (task message %d)\n",
				d.ID, d.Method, d.Host, d.Reason, d.Error, orDash(d.Detail), d.Attempts, d.Subject, fmtTime(d.FirstFailure), fmtTime(d.LastFailure),
				fmtTime(d.DeadAt), replayedText(d.Replayed), d.Seq, d.Gen)
			return nil
		case "replay":
			var receipts []stream.Receipt
			filtered := df.method != "" || df.reason != "" || df.since > 0
			switch {
			case fs.NArg() > 0 && (all || filtered):
				return usageError("dead replay: give ids, or --all and filters, not both")
			case fs.NArg() > 0 && dryRun:
				return usageError("dead replay: --dry-run goes with --all or filters; dead show ID shows a letter")
			case all || filtered:
				f, err = chooseReplays(ctx, c, df, f, yes, dryRun, stdout, stderr)
				if err != nil || f.IDs == nil {
					return explain(err, ae)
				}
				receipts, err = adm.ReplayAll(ctx, f)
			case fs.NArg() == 0:
				return usageError("dead replay: want task ids, or --all")
			default:
				for _, id := range fs.Args() {
					if _, err := c.DeadLetterOf(ctx, id); err != nil {
						return explain(fmt.Errorf("%w; nothing replayed", noDeadLetter(id, err)), ae)
					}
				}
				var errs []error
				for _, id := range fs.Args() {
					r, err := adm.Replay(ctx, id)
					if r.ID != "" && !r.Duplicate {
						receipts = append(receipts, r) // queued, even if recording the replay failed
					}
					if err != nil {
						errs = append(errs, noDeadLetter(id, err))
					}
				}
				err = errors.Join(errs...)
			}
			for _, r := range receipts {
				_ = enc.Encode(r)
			}
			if err != nil || !wait {
				return explain(err, ae)
			}
			failed := 0
			stopWatch, watched := make(chan struct{}), make(chan struct{})
			go func() { defer close(watched); watchWorkers(ctx, stopWatch, c, stderr, "dead replay") }()
			defer func() { close(stopWatch); <-watched }()
			err = c.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
				if err != nil {
					failed++
				}
				_ = enc.Encode(o)
			})
			if err != nil {
				return stillQueued(ctx, err, ae, len(receipts), false, 0)
			}
			if failed > 0 {
				return &exitError{code: 1, err: fmt.Errorf("%d of %d replayed tasks not solved", failed, len(receipts))}
			}
			return nil
		case "purge":
			return purgeDead(ctx, adm, ae, df, f, fs.Args(), all, yes, dryRun, stdout)
		}
		return nil
	})
}

// redyingReasons are the reasons whose letters die again when replayed as
// they are: the service refused the task itself, the task is not valid, or
// its owner canceled it. replay --all takes them only when --reason names
// them.
var redyingReasons = []retry.Reason{retry.ReasonPermanent, retry.ReasonInvalidTask, retry.ReasonCanceled}

// chooseReplays lists the letters replay --all or its filters select (the
// latest of each task, not replayed yet, without the reasons that would
// die again unless --reason names one), and returns the filter that replays
// exactly those ids. Without --yes, or with --dry-run, it lists them and
// returns a filter with nil IDs: nothing is replayed, since each replay is
// paid for again.
func chooseReplays(ctx context.Context, c *stream.Client, df deadFilterFlags, f stream.DeadFilter,
	yes, dryRun bool, stdout, stderr io.Writer) (stream.DeadFilter, error) {
	f.Pending = true
	ds, err := c.DeadLetters(ctx, f)
	if err != nil {
		return f, err
	}
	latest := map[string]stream.DeadLetter{}
	skipped := map[retry.Reason]int{}
	for _, d := range ds {
		latest[d.ID] = d
	}
	var chosen []stream.DeadLetter
	for _, d := range ds {
		if latest[d.ID].Seq != d.Seq {
			continue
		}
		if df.reason == "" && slices.Contains(redyingReasons, d.Reason) {
			skipped[d.Reason]++
			continue
		}
		chosen = append(chosen, d)
	}
	var notes []string
	for _, r := range redyingReasons {
		if n := skipped[r]; n > 0 {
			notes = append(notes, fmt.Sprintf("%d %s", n, r))
		}
	}
	skippedLine := func(w io.Writer) {
		if len(notes) > 0 {
			fmt.Fprintf(w, "left out %s letter(s), which would die again: name --reason to replay them\n", strings.Join(notes, ", "))
		}
	}
	if dryRun || !yes {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tMETHOD\tREASON\tERROR\tDEAD AT")
		for _, d := range chosen {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Method, d.Reason, d.Error, d.DeadAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return f, err
		}
		skippedLine(stdout)
		f.IDs = nil
		if dryRun {
			fmt.Fprintf(stdout, "would replay %d dead letter(s)\n", len(chosen))
			return f, nil
		}
		return f, usageError("would replay %d dead letter(s), each paid for again; add --yes to do it", len(chosen))
	}
	f.IDs = make([]string, 0, len(chosen))
	for _, d := range chosen {
		f.IDs = append(f.IDs, d.ID)
	}
	if len(f.IDs) == 0 {
		skippedLine(stderr)
		// On stderr: stdout is the receipts, JSON lines, which a script
		// reads.
		fmt.Fprintln(stderr, "nothing to replay")
		return stream.DeadFilter{}, nil
	}
	return f, nil
}

// purgeDead deletes exactly what the command line names: the dead letters of
// the ids given (every one of them must have one), or with --all or a
// filter every letter that matches. Without --yes, or with --dry-run, it
// lists them and deletes nothing.
func purgeDead(ctx context.Context, adm *stream.Admin, ae *asyncErrors, df deadFilterFlags, f stream.DeadFilter,
	ids []string, all, yes, dryRun bool, stdout io.Writer) error {
	filtered := df.method != "" || df.reason != "" || df.since > 0
	switch {
	case len(ids) > 0 && (all || filtered):
		return usageError("dead purge: give ids, or --all and filters, not both")
	case len(ids) == 0 && !all && !filtered:
		return usageError("dead purge: want task ids, --all, or a filter (--method, --reason, --since); --dry-run lists what would go")
	}
	for _, id := range ids {
		if err := stream.ValidateID(id); err != nil {
			return usageError("dead purge: %v", err)
		}
	}
	f.IDs = ids
	ds, err := adm.DeadLetters(ctx, f)
	if err != nil {
		return explain(err, ae)
	}
	if missing := idsWithout(ids, ds); len(missing) > 0 {
		return fmt.Errorf("dead purge: no dead letter of %s; nothing deleted", strings.Join(missing, ", "))
	}
	if dryRun || !yes {
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "ID\tMETHOD\tREASON\tERROR\tDEAD AT")
		for _, d := range ds {
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", d.ID, d.Method, d.Reason, d.Error, d.DeadAt.UTC().Format(time.RFC3339))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
		if dryRun {
			fmt.Fprintf(stdout, "would delete %d dead letter(s)\n", len(ds))
			return nil
		}
		return usageError("would delete %d dead letter(s); add --yes to do it", len(ds))
	}
	n, err := adm.PurgeDeadLetters(ctx, ds)
	if n > 0 || err == nil {
		// A refusal before the first deletion is said by the error alone.
		fmt.Fprintf(stdout, "purged %d dead letter(s)\n", n)
	}
	return explain(err, ae)
}

// noDeadLetter says a missing dead letter as such: the task may well exist
// (queued, solving, solved), and task show says where it stands.
func noDeadLetter(id string, err error) error {
	if errors.Is(err, stream.ErrNotFound) {
		return fmt.Errorf("task %s has no dead letter (captchaq task show %s says where it stands)", id, id)
	}
	return err
}

// idsWithout returns the ids no letter of ds belongs to.
func idsWithout(ids []string, ds []stream.DeadLetter) []string {
	var out []string
	for _, id := range ids {
		if !slices.ContainsFunc(ds, func(d stream.DeadLetter) bool { return d.ID == id }) {
			out = append(out, id)
		}
	}
	return out
}

func replayedText(r *stream.Replay) string {
	if r == nil {
		return "no"
	}
	if r.TaskSeq == 0 {
		return fmt.Sprintf("started %s, not known to have queued: replay it again to finish", r.At.UTC().Format(time.RFC3339))
	}
	return fmt.Sprintf("%s (task message %d)", r.At.UTC().Format(time.RFC3339), r.TaskSeq)
}

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return t.UTC().Format(time.RFC3339Nano)
}

func runTrace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("trace", "ID [flags]", stdout)
	asJSON := fs.Bool("json", false, "print JSON lines")
	nf := addFlags[natsFlags](fs)
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("trace: want one task id")
	}
	return nf.withSession(ctx, "captchaq-trace", stream.ClientConfig{}, func(ctx context.Context, c *stream.Client, ae *asyncErrors) error {
		entries, err := c.Trace(ctx, fs.Arg(0))
		if errors.Is(err, stream.ErrNotFound) {
			return fmt.Errorf("no task %s in the stream: an unknown id, or older than the stream keeps", fs.Arg(0))
		}
		if err != nil {
			return explain(err, ae)
		}
		if *asJSON {
			enc := json.NewEncoder(stdout)
			for _, e := range entries {
				_ = enc.Encode(e)
			}
			return nil
		}
		tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "TIME\tSTEP\tATTEMPT\tWORKER/CLIENT\tCODE\tREASON\tDELAY\tDETAIL")
		for _, e := range entries {
			delay := ""
			if e.Delay > 0 {
				delay = e.Delay.String()
			}
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.At.UTC().Format("2006-01-02T15:04:05.000Z"), e.Kind, attemptText(e.Attempt),
				cmp.Or(e.Worker, e.Client), e.Code, e.Reason, delay, e.Detail)
		}
		return tw.Flush()
	})
}

func attemptText(n int) string {
	if n == 0 {
		return ""
	}
	return fmt.Sprint(n)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

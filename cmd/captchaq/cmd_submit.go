package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// readTasks reads JSON lines (blank lines and lines starting with # are
// skipped) and validates every task with c. It returns all the problems at
// once, each naming its line, so that a file is fixed in one go; on any
// problem it returns no tasks. named says whether every task named its id
// (submitting the file again then queues nothing twice).
//
// A parameter its method does not know is one of those problems, naming
// its line and, for a near miss, the known name ("did you mean
// googlekey?").
//
// useAt and notBefore, when set, are given to the tasks that name none.
func readTasks(r io.Reader, c *stream.Client, useAt, notBefore stream.When) (tasks []stream.Task, named bool, err error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 8<<20)
	var (
		errs []error
		seen = map[string]int{}
	)
	named = true
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		t, err := stream.ParseTask(b)
		if t.ID == "" {
			named = false
		}
		if err == nil {
			if t.UseAt.IsZero() {
				t.UseAt = useAt
			}
			if t.NotBefore.IsZero() {
				t.NotBefore = notBefore
			}
			t, err = c.Prepare(t)
		}
		if err == nil {
			if prev, dup := seen[t.ID]; dup {
				err = &stream.TaskError{ID: t.ID, Err: fmt.Errorf("id: already used on line %d", prev)}
			}
			seen[t.ID] = line
		}
		if err != nil {
			var te *stream.TaskError
			if errors.As(err, &te) {
				te.Line = line
			}
			errs = append(errs, err)
			continue
		}
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, false, fmt.Errorf("read tasks: %w", err)
	}
	if len(errs) > 0 {
		return nil, false, fmt.Errorf("%d invalid task(s), nothing submitted:\n%w", len(errs), errors.Join(errs...))
	}
	return tasks, named, nil
}

func openInput(name string) (io.ReadCloser, error) {
	if name == "-" {
		return io.NopCloser(os.Stdin), nil
	}
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("submit", "[flags] FILE|-", stdout)
	wait := fs.Bool("wait", false, "after submitting, print each outcome as it arrives; exit 1 unless every task is solved")
	timeout := fs.Duration("timeout", 0, "with --wait, give up after this long (default: no limit)")
	var useAt, notBefore whenFlag
	fs.Var(&useAt, "use-at", "for tasks that name no use_at: when their tokens will be used, RFC 3339 or a duration from submission (90s); the solve starts just in time")
	fs.Var(&notBefore, "not-before", "for tasks that name no not_before: the earliest their solves start, RFC 3339 or a duration from submission")
	nf := addFlags[natsFlags](fs)
	if err := parseArgs(fs, args, 1); err != nil {
		return err
	}
	if fs.NArg() != 1 {
		return usageError("want one task file (JSON lines) or - for standard input")
	}
	in, err := openInput(fs.Arg(0))
	if err != nil {
		return err
	}
	defer in.Close()
	return nf.withSession(ctx, "captchaq-submit", stream.ClientConfig{}, func(ctx context.Context, c *stream.Client, ae *asyncErrors) error {
		tasks, named, err := readTasks(in, c, useAt.When, notBefore.When)
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		if len(tasks) == 0 {
			return usageError("no task in %s: want one JSON object per line", inputName(fs.Arg(0)))
		}
		receipts, err := c.SubmitAll(ctx, tasks)
		enc := json.NewEncoder(stdout)
		for _, r := range receipts {
			_ = enc.Encode(r)
		}
		if err != nil {
			return explain(fmt.Errorf("submitted %d of %d: %w", len(receipts), len(tasks), err), ae)
		}
		if !*wait {
			return nil
		}
		if *timeout > 0 {
			var cancel context.CancelFunc
			ctx, cancel = context.WithTimeout(ctx, *timeout)
			defer cancel()
		}
		failed, arrived := 0, 0
		stopWatch, watched := make(chan struct{}), make(chan struct{})
		go func() { defer close(watched); watchWorkers(ctx, stopWatch, c, stderr, "submit") }()
		defer func() { close(stopWatch); <-watched }()
		err = c.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
			arrived++
			if err != nil {
				failed++
			}
			_ = enc.Encode(o)
		})
		if err != nil {
			return stillQueued(ctx, err, ae, len(receipts)-arrived, named, *timeout)
		}
		if failed > 0 {
			return &exitError{code: 1, err: fmt.Errorf("%d of %d tasks not solved", failed, len(receipts))}
		}
		return nil
	})
}

// stillQueued says what became of tasks a wait gave up on: they stay
// queued, and how to see their outcomes. Interrupted, the exit code is the
// signal's (130 for Ctrl-C).
func stillQueued(ctx context.Context, err error, ae *asyncErrors, pending int, named bool, timeout time.Duration) error {
	sig, interrupted := interruptOf(ctx)
	if !interrupted && !errors.Is(err, context.DeadlineExceeded) {
		return explain(err, ae)
	}
	why := fmt.Sprintf("--timeout %s passed", timeout)
	code := 1
	if interrupted {
		why, code = sig.Error(), sig.exitCode()
	}
	hint := "follow their outcomes with `captchaq results --follow`"
	if named {
		hint = fmt.Sprintf("run the same command within %s to resume waiting (ids submitted again that soon are not queued twice), or follow them with `captchaq results --follow`",
			stream.DefaultDuplicateWindow)
	}
	return &exitError{code: code, err: fmt.Errorf("%s: %d task(s) without an outcome yet are still queued or being solved; %s", why, pending, hint)}
}

// paramFlag collects repeated --param k=v.
type paramFlag stream.Params

func (p paramFlag) String() string { return "" }
func (p paramFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("want key=value, got %q", s)
	}
	p[k] = v
	return nil
}

func runSolve(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("solve", "--method M --param k=v [--param k=v ...] [flags]", stdout)
	method := fs.String("method", "", "solving method: "+strings.Join(solver.Methods(), ", "))
	params := stream.Params{}
	fs.Var(paramFlag(params), "param", "a method parameter as key=value; repeat for each (sitekey=…, pageurl=…)")
	id := fs.String("id", "", "task id (default: generated)")
	priority := fs.String("priority", "high", "high or normal (an interactive solve jumps the batch queue by default)")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long; it is also the task's deadline")
	asJSON := fs.Bool("json", false, "print the whole outcome as JSON instead of the answer alone")
	var useAt, notBefore whenFlag
	fs.Var(&useAt, "use-at", "when the token will be used, RFC 3339 or a duration from now (90s): the solve starts just in time; --timeout counts from then")
	fs.Var(&notBefore, "not-before", "the earliest the solve starts, RFC 3339 or a duration from now; --timeout counts from then")
	nf := addFlags[natsFlags](fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *method == "" {
		return usageError("--method is required")
	}
	return nf.withSession(ctx, "captchaq-solve", stream.ClientConfig{}, func(ctx context.Context, c *stream.Client, ae *asyncErrors) error {
		if *timeout <= 0 {
			return usageError("--timeout %s: want a positive duration", *timeout)
		}
		// A scheduled solve's timeout counts from when it may start.
		now := time.Now()
		from := now
		for _, w := range []stream.When{useAt.When, notBefore.When} {
			if at := w.From(now); at.After(from) {
				from = at
			}
		}
		task, err := c.Prepare(stream.Task{ID: *id, Method: *method, Params: params, Priority: stream.Priority(*priority),
			Deadline: from.Add(*timeout), UseAt: useAt.When, NotBefore: notBefore.When})
		if err != nil {
			return &exitError{code: 2, err: err}
		}
		sctx, cancel := context.WithDeadline(ctx, from.Add(*timeout))
		defer cancel()
		watched, stopWatch := make(chan struct{}), make(chan struct{})
		go func() { defer close(watched); watchTask(sctx, stopWatch, c, task.ID, stderr) }()
		out, err := c.Solve(sctx, task)
		close(stopWatch)
		<-watched
		if *asJSON && out.ID != "" {
			_ = json.NewEncoder(stdout).Encode(out)
		}
		if err != nil {
			var te *stream.TaskError
			if errors.As(err, &te) {
				return &exitError{code: 2, err: err}
			}
			if sctx.Err() != nil {
				return solveGaveUp(ctx, c, task.ID, *timeout, ae, err)
			}
			if errors.Is(err, stream.ErrNotSolved) {
				return fmt.Errorf("task %s not solved: %s", out.ID, deadWords(out))
			}
			return explain(err, ae)
		}
		if !*asJSON {
			fmt.Fprintln(stdout, out.Text())
		}
		return nil
	})
}

// solveGaveUp says, in the user's terms, why solve has no answer: Ctrl-C
// (the task is canceled, so no worker pays for it later) or --timeout (what
// the task is doing: never taken by a worker, at the service, or retrying).
func solveGaveUp(ctx context.Context, c *stream.Client, id string, timeout time.Duration, ae *asyncErrors, err error) error {
	// The task's state is read, and a cancel stored, after ctx ended.
	lctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if sig, ok := interruptOf(ctx); ok {
		t, cerr := c.Cancel(lctx, id, "captchaq solve interrupted")
		var msg string
		switch {
		case errors.Is(cerr, stream.ErrNotFound):
			msg = fmt.Sprintf("task %s was not submitted", id)
		case errors.Is(cerr, stream.ErrTaskEnded):
			msg = fmt.Sprintf("task %s had just ended: `captchaq results` or `captchaq trace %s` shows how", id, id)
		case cerr != nil:
			msg = fmt.Sprintf("task %s could not be canceled (%v): a worker may still solve it", id, explain(cerr, ae))
		case t.Status == stream.TaskSolving:
			msg = fmt.Sprintf("task %s canceled, but its attempt was already at the service: that answer is still stored and paid for; no retry follows", id)
		default:
			msg = fmt.Sprintf("task %s canceled: no worker will solve it (it ends dead/canceled)", id)
		}
		return &exitError{code: sig.exitCode(), err: fmt.Errorf("%s: %s", sig, msg)}
	}
	t, terr := c.TaskOf(lctx, id)
	var msg string
	switch {
	case terr != nil:
		return explain(fmt.Errorf("no answer within --timeout %s: %w", timeout, err), ae)
	case t.Status == stream.TaskQueued && pausedLanes(lctx, c)[t.Lane]:
		msg = fmt.Sprintf("task %s waits in lane %s, which is paused: workers take none of its tasks until `captchaq lane resume %s`", id, t.Lane, t.Lane)
	case t.Status == stream.TaskQueued && t.Worker == "":
		msg = fmt.Sprintf("no worker took task %s (is one running against this server? `captchaq workers ls` lists them)", id)
	case t.Status == stream.TaskQueued:
		msg = fmt.Sprintf("task %s was handed back by worker %s and waits for another", id, t.Worker)
	case t.Status == stream.TaskSolving:
		msg = fmt.Sprintf("task %s is still at the solving service (worker %s, attempt %d)", id, t.Worker, t.Attempts)
	case t.Status == stream.TaskScheduled:
		msg = fmt.Sprintf("task %s is not due: it waits in the stream until %s", id, t.StartAt.Format(time.RFC3339))
	case t.Status == stream.TaskRetrying:
		msg = fmt.Sprintf("task %s failed %d time(s) (last %s) and waits to retry", id, t.Attempts, t.LastCode)
	default:
		msg = fmt.Sprintf("task %s ended just now: `captchaq trace %s` shows how", id, id)
	}
	return fmt.Errorf("no answer within --timeout %s: %s; its deadline has passed, so it ends dead/expired", timeout, msg)
}

func runResults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("results", "[--follow] [--id ID] [--status solved|dead] [--since D] [flags]", stdout)
	follow := fs.Bool("follow", false, "after the stored outcomes, keep printing new ones until interrupted")
	id := fs.String("id", "", "only this task's outcomes")
	status := fs.String("status", "", "only outcomes of this status: solved or dead")
	since := fs.Duration("since", 0, "only outcomes stored within this long (e.g. 1h; default: all the stream keeps)")
	nf := addFlags[natsFlags](fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	// An --id given empty ("$ID" unset in a script) is an error, not "every
	// task": the first solution printed would be another task's.
	idSet := false
	fs.Visit(func(f *flag.Flag) { idSet = idSet || f.Name == "id" })
	switch {
	case idSet && stream.ValidateID(*id) != nil:
		return usageError("--id: %v", stream.ValidateID(*id))
	case *status != "" && *status != string(stream.StatusSolved) && *status != string(stream.StatusDead):
		return usageError("--status %q: want solved or dead", *status)
	case *since < 0:
		return usageError("--since %s: want a positive duration", *since)
	case fs.NArg() > 0:
		return usageError("results: unexpected argument %q (a task id goes with --id)", fs.Arg(0))
	}
	return nf.withSession(ctx, "captchaq-results", stream.ClientConfig{}, func(ctx context.Context, c *stream.Client, ae *asyncErrors) error {
		enc := json.NewEncoder(stdout)
		var from time.Time
		if *since > 0 {
			from = time.Now().Add(-*since)
		}
		printed := 0
		err := c.OutcomesSince(ctx, from, *follow, func(o stream.Outcome) {
			if (*id == "" || o.ID == *id) && (*status == "" || string(o.Status) == *status) {
				printed++
				_ = enc.Encode(o)
			}
		})
		if *follow && errors.Is(err, context.Canceled) {
			return nil
		}
		if err == nil && *id != "" && printed == 0 {
			// Asked about one task, an empty answer must not read as success.
			return fmt.Errorf("no outcome of task %s%s: an unknown id, one that is not finished yet (captchaq task show %s), or older than the stream keeps",
				*id, map[bool]string{true: " with status " + *status}[*status != ""], *id)
		}
		return explain(err, ae)
	})
}

// inputName is how messages name a task file argument.
func inputName(arg string) string {
	if arg == "-" {
		return "standard input"
	}
	return arg
}

// deadWords says why a task ended dead, as a user reads it: the reason, what
// the service did (its code in words where it has some), and the detail.
func deadWords(o stream.Outcome) string {
	msg := o.Reason
	switch o.Error {
	case "":
	case solver.CodeUnreachable:
		msg += ": the solving service could not be reached"
	default:
		msg += ": " + o.Error
	}
	if o.Detail != "" {
		msg += " (" + o.Detail + ")"
	}
	return msg
}

// whenFlag is a flag holding an RFC 3339 instant or a duration from
// submission (stream.When).
type whenFlag struct{ stream.When }

func (w *whenFlag) Set(s string) error {
	v, err := stream.ParseWhen(s)
	if err != nil {
		return err
	}
	w.When = v
	return nil
}

package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
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
// problem it returns no tasks.
//
// A parameter its method does not know is passed through, as the service
// ignores it, with a warning on warn naming its line and, for a near miss,
// the known name ("did you mean googlekey?").
func readTasks(r io.Reader, c *stream.Client, warn io.Writer) ([]stream.Task, error) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64*1024), 8<<20)
	var (
		tasks []stream.Task
		errs  []error
		seen  = map[string]int{}
	)
	for line := 1; sc.Scan(); line++ {
		b := bytes.TrimSpace(sc.Bytes())
		if len(b) == 0 || b[0] == '#' {
			continue
		}
		t, err := stream.ParseTask(b)
		if err == nil {
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
		for _, u := range solver.UnknownParams(t.Method, t.Params) {
			fmt.Fprintf(warn, "warning: line %d (id %s): %s\n", line, t.ID, u)
		}
		tasks = append(tasks, t)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read tasks: %w", err)
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("%d invalid task(s), nothing submitted:\n%w", len(errs), errors.Join(errs...))
	}
	return tasks, nil
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
	fs := newFlagSet("submit", "[flags] FILE|-", stderr)
	wait := fs.Bool("wait", false, "after submitting, print each outcome as it arrives; exit 1 unless every task is solved")
	timeout := fs.Duration("timeout", 0, "with --wait, give up after this long (default: no limit)")
	var nf natsFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
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
	ss, err := nf.session(ctx, "captchaq-submit", stream.ClientConfig{})
	if err != nil {
		return err
	}
	defer ss.close()
	ctx, c, ae := ss.ctx, ss.client, ss.ae
	tasks, err := readTasks(in, c, stderr)
	if err != nil {
		return &exitError{code: 2, err: err}
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
	failed := 0
	err = c.WaitAll(ctx, receipts, func(o stream.Outcome, err error) {
		if err != nil {
			failed++
		}
		_ = enc.Encode(o)
	})
	if err != nil {
		return explain(err, ae)
	}
	if failed > 0 {
		return &exitError{code: 1, err: fmt.Errorf("%d of %d tasks not solved", failed, len(receipts))}
	}
	return nil
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
	fs := newFlagSet("solve", "--method M --param k=v [--param k=v ...] [flags]", stderr)
	method := fs.String("method", "", "solving method: "+strings.Join(solver.Methods(), ", "))
	params := stream.Params{}
	fs.Var(paramFlag(params), "param", "a method parameter as key=value; repeat for each (sitekey=…, pageurl=…)")
	id := fs.String("id", "", "task id (default: generated)")
	priority := fs.String("priority", "high", "high or normal (an interactive solve jumps the batch queue by default)")
	timeout := fs.Duration("timeout", 3*time.Minute, "give up after this long; it is also the task's deadline")
	asJSON := fs.Bool("json", false, "print the whole outcome as JSON instead of the answer alone")
	var nf natsFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if *method == "" {
		return usageError("--method is required")
	}
	ss, err := nf.session(ctx, "captchaq-solve", stream.ClientConfig{})
	if err != nil {
		return err
	}
	defer ss.close()
	ctx, c, ae := ss.ctx, ss.client, ss.ae
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	for _, u := range solver.UnknownParams(*method, params) {
		fmt.Fprintf(stderr, "warning: %s\n", u)
	}
	out, err := c.Solve(ctx, stream.Task{ID: *id, Method: *method, Params: params, Priority: *priority})
	if *asJSON && out.ID != "" {
		_ = json.NewEncoder(stdout).Encode(out)
	}
	if err != nil {
		var te *stream.TaskError
		if errors.As(err, &te) {
			return &exitError{code: 2, err: err}
		}
		return explain(err, ae)
	}
	if !*asJSON {
		fmt.Fprintln(stdout, out.Text())
	}
	return nil
}

func runResults(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("results", "[--follow] [flags]", stderr)
	follow := fs.Bool("follow", false, "after the stored outcomes, keep printing new ones until interrupted")
	var nf natsFlags
	nf.register(fs)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	ss, err := nf.session(ctx, "captchaq-results", stream.ClientConfig{})
	if err != nil {
		return err
	}
	defer ss.close()
	ctx, c, ae := ss.ctx, ss.client, ss.ae
	enc := json.NewEncoder(stdout)
	err = c.Results(ctx, *follow, func(o stream.Outcome) { _ = enc.Encode(o) })
	if *follow && errors.Is(err, context.Canceled) {
		return nil
	}
	return explain(err, ae)
}

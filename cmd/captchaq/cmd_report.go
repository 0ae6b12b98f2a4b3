package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// reportSynopsis is the usage line of `captchaq report`, and what its
// argument may be.
const reportSynopsis = "good|bad CAPTCHA_ID|TASK_ID [flags]\n\n" +
	"CAPTCHA_ID is the solving service's id of the captcha: the outcome's captcha_id (digits).\n" +
	"Given a captchaq task id instead, report looks its captcha_id up on the NATS server (--nats and\n" +
	"the connection flags; any role may read it). A task a worker with providers solved is reported to\n" +
	"the provider its outcome names, with --providers (the worker's file): only a task id says which."

// runReport reports a solved captcha to the solving service as good
// (reportgood) or bad (reportbad): `captchaq report good|bad ID`, where ID
// is the service's captcha id (the outcome's captcha_id, all digits) or a
// captchaq task id, whose captcha_id is looked up in the stream.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", reportSynopsis, stdout)
	var sf solverFlags
	sf.registerService(fs)
	nf := addFlags[natsFlags](fs)
	providersFile := fs.String("providers", "", "report a task id's captcha to the provider of this file (docs/providers.md) that solved it, as its outcome says")
	if err := parseArgs(fs, args, 2); err != nil {
		return err
	}
	if fs.NArg() != 2 {
		return usageError("report: want good|bad and the captcha id, got %d arguments", fs.NArg())
	}
	verdict, id := fs.Arg(0), fs.Arg(1)
	if verdict != "good" && verdict != "bad" {
		return usageError("report: %q is neither good nor bad", verdict)
	}
	if id == "" {
		return usageError("report: empty captcha id")
	}
	what := "captcha " + id
	var out stream.Outcome
	if strings.Trim(id, "0123456789") != "" {
		var err error
		if out, err = outcomeOf(ctx, nf, id); err != nil {
			return err
		}
		what = fmt.Sprintf("captcha %s (task %s)", out.CaptchaID, id)
		id = out.CaptchaID
	} else if *providersFile != "" {
		return usageError("report: with --providers, give the task id: a captcha id alone names no provider")
	}
	if *providersFile != "" {
		set, err := sf.openProviders(*providersFile, "deadline")
		if err != nil {
			return fmt.Errorf("report: %w", err)
		}
		if out.Provider != "" {
			what += " to provider " + out.Provider
		}
		if err := set.ReportOn(ctx, out.Provider, out.Method, id, verdict == "good"); err != nil {
			return fmt.Errorf("report %s %s: %w", verdict, what, err)
		}
		fmt.Fprintf(stdout, "reported %s as %s\n", what, verdict)
		return nil
	}
	if out.Provider != "" {
		// Its captcha id is that provider's: to the flags' service it
		// names nothing of this task's, or another account's captcha.
		return fmt.Errorf("report: %s was solved by provider %s: report it with --providers (the worker's file), not to the service of --solver-url", what, out.Provider)
	}
	c, err := sf.client(solver.Timing{})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := c.Report(ctx, id, verdict == "good"); err != nil {
		return fmt.Errorf("report %s %s: %w", verdict, what, err)
	}
	fmt.Fprintf(stdout, "reported %s as %s\n", what, verdict)
	return nil
}

// outcomeOf returns the outcome of task id's solve, which names the
// service's captcha id (and the provider that solved it, if one did),
// from its event log (which outlives the token's outcome).
func outcomeOf(ctx context.Context, nf *natsFlags, id string) (stream.Outcome, error) {
	if err := stream.ValidateID(id); err != nil {
		return stream.Outcome{}, usageError("report: %q is neither a captcha id (digits) nor a task id: %v", id, err)
	}
	ss, err := nf.session(ctx, "captchaq-report", stream.ClientConfig{})
	if err != nil {
		return stream.Outcome{}, fmt.Errorf("report: %q is not a captcha id (digits), so it was taken for a task id, to look up on NATS: %w", id, err)
	}
	defer ss.close()
	t, err := ss.client.TaskOf(ss.ctx, id)
	if errors.Is(err, stream.ErrNotFound) {
		return stream.Outcome{}, fmt.Errorf("report: %q is not a captcha id (digits), and no task has that id", id)
	}
	if err != nil {
		return stream.Outcome{}, explain(err, ss.ae)
	}
	if t.Status != stream.TaskDone {
		return stream.Outcome{}, fmt.Errorf("report: task %s is %s, not solved yet", id, t.Status)
	}
	out, err := ss.client.Wait(ss.ctx, id)
	if out.CaptchaID == "" {
		if err == nil {
			err = errors.New("its outcome names no captcha id")
		}
		return stream.Outcome{}, fmt.Errorf("report: task %s has no solved captcha to report: %w", id, err)
	}
	return out, nil
}

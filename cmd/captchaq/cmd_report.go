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
	"the connection flags; any role may read it)."

// runReport reports a solved captcha to the solving service as good
// (reportgood) or bad (reportbad): `captchaq report good|bad ID`, where ID
// is the service's captcha id (the outcome's captcha_id, all digits) or a
// captchaq task id, whose captcha_id is looked up in the stream.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", reportSynopsis, stdout)
	var sf solverFlags
	sf.registerService(fs)
	nf := addFlags[natsFlags](fs)
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
	if strings.Trim(id, "0123456789") != "" {
		cid, err := captchaIDOf(ctx, nf, id)
		if err != nil {
			return err
		}
		what = fmt.Sprintf("captcha %s (task %s)", cid, id)
		id = cid
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

// captchaIDOf returns the service's captcha id of task id's solve, from
// its event log (which outlives the token's outcome).
func captchaIDOf(ctx context.Context, nf *natsFlags, id string) (string, error) {
	if err := stream.ValidateID(id); err != nil {
		return "", usageError("report: %q is neither a captcha id (digits) nor a task id: %v", id, err)
	}
	ss, err := nf.session(ctx, "captchaq-report", stream.ClientConfig{})
	if err != nil {
		return "", fmt.Errorf("report: %q is not a captcha id (digits), so it was taken for a task id, to look up on NATS: %w", id, err)
	}
	defer ss.close()
	t, err := ss.client.TaskOf(ss.ctx, id)
	if errors.Is(err, stream.ErrNotFound) {
		return "", fmt.Errorf("report: %q is not a captcha id (digits), and no task has that id", id)
	}
	if err != nil {
		return "", explain(err, ss.ae)
	}
	if t.Status != stream.TaskDone {
		return "", fmt.Errorf("report: task %s is %s, not solved yet", id, t.Status)
	}
	out, err := ss.client.Wait(ss.ctx, id)
	if out.CaptchaID == "" {
		if err == nil {
			err = errors.New("its outcome names no captcha id")
		}
		return "", fmt.Errorf("report: task %s has no solved captcha to report: %w", id, err)
	}
	return out.CaptchaID, nil
}

package main

import (
	"context"
	"fmt"
	"io"

	"github.com/captchaq/captchaq/solver"
)

// runReport reports a solved captcha to the solving service as good
// (reportgood) or bad (reportbad): `captchaq report good|bad ID`, with the
// provider's captcha id from the outcome.
func runReport(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("report", "[flags] good|bad CAPTCHA_ID", stderr)
	var sf solverFlags
	sf.register(fs)
	if err := parseFlags(fs, args); err != nil {
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
	c, err := sf.client(solver.Timing{})
	if err != nil {
		return fmt.Errorf("report: %w", err)
	}
	if err := c.Report(ctx, id, verdict == "good"); err != nil {
		return fmt.Errorf("report %s %s: %w", verdict, id, err)
	}
	fmt.Fprintf(stdout, "reported captcha %s as %s\n", id, verdict)
	return nil
}

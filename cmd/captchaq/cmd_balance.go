package main

import (
	"context"
	"fmt"
	"io"
	"strconv"

	"github.com/captchaq/captchaq/solver"
)

// runBalance prints the solving service account's balance.
func runBalance(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("balance", "[flags]", stdout)
	var sf solverFlags
	sf.registerService(fs)
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	c, err := sf.client(solver.Timing{})
	if err != nil {
		return fmt.Errorf("balance: %w", err)
	}
	bal, err := c.Balance(ctx)
	if err != nil {
		return fmt.Errorf("balance: %w", err)
	}
	fmt.Fprintln(stdout, strconv.FormatFloat(bal, 'f', -1, 64))
	return nil
}

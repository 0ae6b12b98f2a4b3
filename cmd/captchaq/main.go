// Command captchaq distributes CAPTCHA-solving tasks over NATS JetStream to a
// pool of workers that solve them through a 2captcha-compatible service.
//
// Run `captchaq help` for the commands; each takes --help.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"syscall"
)

// command is one subcommand: what it does in a line, and how to run it.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"server":  {"run the NATS JetStream server (embedded nats-server) from nats.conf", runServer},
	"worker":  {"pull tasks and solve them through the solving service", runWorker},
	"submit":  {"submit tasks from a JSON-lines file (or -), optionally wait for outcomes", runSubmit},
	"solve":   {"solve one captcha and print the answer (for scripts and CI)", runSolve},
	"results": {"print outcomes as JSON lines, optionally following new ones", runResults},
	"dead":    {"list, show, replay and purge dead letters", runDead},
	"trace":   {"show the life of one task, for audits", runTrace},
	"stats":   {"show queue depth, in-flight work, outcomes and solve times", runStats},
	"run":     {"all in one: embedded server, emulator or real API, workers; submit FILE and wait", runRun},
	"fakeapi": {"serve the emulator of the solving service (for tests and demos)", runFakeAPI},
	"balance": {"print the solving service account's balance", runBalance},
	"report":  {"report a solved captcha as good or bad to the solving service", runReport},
	"init":    {"create or update the stream, consumers and plan quota on a NATS server captchaq does not run (admin)", runInit},
	"passwd":  {"print the bcrypt hash of a password read from stdin (for nats.conf)", runPasswd},
}

// exitError carries a process exit code through the error chain.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	go func() {
		<-ctx.Done()
		stop() // a second Ctrl-C ends the process at once
	}()
	os.Exit(realMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "help" || args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "captchaq: unknown command %q\n\n", args[0])
		usage(stderr)
		return 2
	}
	err := cmd.run(ctx, args[1:], stdout, stderr)
	var ee *exitError
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case errors.As(err, &ee):
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintf(stderr, "captchaq %s: %v\n", args[0], ee.err)
		}
		return ee.code
	default:
		fmt.Fprintf(stderr, "captchaq %s: %v\n", args[0], err)
		return 1
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "captchaq: a durable CAPTCHA-solving queue on NATS JetStream\n\nUsage: captchaq COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-8s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nEvery flag can also be set by an environment variable CAPTCHAQ_<FLAG> (--solver-url: CAPTCHAQ_SOLVER_URL);\nthe API key comes from CAPTCHAAI_API_KEY or --key-file, never from a flag value.\nRun `captchaq COMMAND --help` for a command's flags.")
}

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
	"runtime/debug"
	"slices"
	"sort"
	"strings"
	"syscall"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/trace"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
)

// command is one subcommand: what it does in a line, and how to run it.
type command struct {
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{
	"server":    {"run the NATS JetStream server (embedded nats-server) from nats.conf", runServer},
	"worker":    {"pull tasks and solve them through the solving service", runWorker},
	"submit":    {"submit tasks from a JSON-lines file (or -), optionally wait for outcomes", runSubmit},
	"solve":     {"solve one captcha and print the answer (for scripts and CI)", runSolve},
	"results":   {"print outcomes as JSON lines, optionally following new ones", runResults},
	"dead":      {"list, show, replay and purge dead letters", runDead},
	"trace":     {"show the life of one task, for audits", runTrace},
	"stats":     {"show queue depth, in-flight work, outcomes and solve times", runStats},
	"run":       {"all in one: embedded server, emulator or real API, workers; submit FILE and wait", runRun},
	"fakeapi":   {"serve the emulator of the solving service (for tests and demos)", runFakeAPI},
	"balance":   {"print the solving service account's balance", runBalance},
	"report":    {"report a solved captcha as good or bad to the solving service", runReport},
	"task":      {"list the tasks that wait or run, show one, cancel one", runTask},
	"lane":      {"pause or resume a lane: workers take none of its tasks meanwhile (admin)", runLane},
	"workers":   {"list the workers alive, from their heartbeats", runWorkers},
	"dashboard": {"serve the live web dashboard (127.0.0.1:8080 by default)", runDashboard},
	"init":      {"create or update the stream, consumers and plan quota on a NATS server captchaq does not run (admin)", runInit},
	"passwd":    {"print the bcrypt hash of a password read from stdin (for nats.conf)", runPasswd},
	"gateway":   {"serve the solving service's API (in.php, res.php) in front of captchaq, for existing scripts and SDKs", runGateway},
}

// tracedCommands start a span of their own when tracing is on: those that
// submit tasks.
var tracedCommands = map[string]bool{"submit": true, "solve": true, "run": true}

// verbGroups are the commands that take a verb, with their verbs.
var verbGroups = map[string][]subcommand{"dead": deadVerbs, "task": taskVerbs, "lane": laneVerbs, "workers": workersVerbs}

// exitError carries a process exit code through the error chain.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

func main() {
	ctx, stop := withSignals(context.Background())
	defer stop()
	os.Exit(realMain(ctx, os.Args[1:], os.Stdout, os.Stderr))
}

// interrupted is the cause of a context that a signal ended.
type interrupted struct{ sig os.Signal }

// Error says it as a user would: "interrupted (Ctrl-C)", "stopped by
// SIGTERM".
func (i interrupted) Error() string {
	switch i.sig {
	case os.Interrupt:
		return "interrupted (Ctrl-C)"
	case syscall.SIGTERM:
		return "stopped by SIGTERM"
	}
	return "stopped by " + i.sig.String()
}

// exitCode is the shell's code for a process the signal ended: 128 + its
// number (130 for Ctrl-C, 143 for SIGTERM).
func (i interrupted) exitCode() int {
	if s, ok := i.sig.(syscall.Signal); ok {
		return 128 + int(s)
	}
	return 130
}

// withSignals returns a context that SIGINT or SIGTERM ends, with an
// interrupted cause; a second signal ends the process at once.
func withSignals(parent context.Context) (context.Context, func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, os.Interrupt, syscall.SIGTERM)
	go func() {
		select {
		case sig := <-ch:
			cancel(interrupted{sig})
			signal.Stop(ch)
		case <-ctx.Done():
		}
	}()
	return ctx, func() { signal.Stop(ch); cancel(context.Canceled) }
}

// interruptOf returns the signal that ended ctx, if one did.
func interruptOf(ctx context.Context) (interrupted, bool) {
	var i interrupted
	ok := errors.As(context.Cause(ctx), &i)
	return i, ok
}

func realMain(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		// No command is a usage error (exit 2, as go and git do), so a
		// script whose arguments went missing fails instead of passing.
		usage(stderr)
		return 2
	}
	if args[0] == "-h" || args[0] == "--help" {
		usage(stdout)
		return 0
	}
	if args[0] == "--version" || args[0] == "version" {
		if len(args) > 1 {
			fmt.Fprintf(stderr, "captchaq %s: takes no arguments, got %q\n", args[0], args[1])
			return 2
		}
		fmt.Fprintln(stdout, "captchaq", version())
		return 0
	}
	if args[0] == "help" {
		if len(args) == 1 || args[1] == "--help" || args[1] == "-h" || args[1] == "help" {
			usage(stdout)
			return 0
		}
		// `captchaq help dead ls` is `captchaq dead ls --help`.
		args = append(slices.Clone(args[1:]), "--help")
	}
	// Short and plural names an operator may reach for.
	if alias, ok := map[string]string{"dash": "dashboard", "tasks": "task"}[args[0]]; ok {
		args = append([]string{alias}, args[1:]...)
	}
	cmd, ok := commands[args[0]]
	if !ok && strings.HasPrefix(args[0], "-") {
		fmt.Fprintln(stderr, flagsFirst(args))
		return 2
	}
	if !ok {
		fmt.Fprintf(stderr, "captchaq: unknown command %q; run `captchaq help` for the commands\n", args[0])
		return 2
	}
	stopTracing, err := startTracing(ctx, "captchaq-"+args[0])
	if err != nil {
		fmt.Fprintf(stderr, "captchaq %s: %v\n", args[0], err)
		return 2
	}
	defer stopTracing()
	if tracedCommands[args[0]] {
		// A producer's own span: the task's trace starts here and goes on
		// in the worker that takes it.
		var span trace.Span
		ctx, span = otel.Tracer("github.com/captchaq/captchaq/cmd/captchaq").Start(ctx, "captchaq "+args[0])
		defer span.End()
	}
	err = cmd.run(ctx, args[1:], stdout, stderr)
	var ee *exitError
	sig, wasInterrupted := interruptOf(ctx)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, flag.ErrHelp):
		return 0
	case wasInterrupted && !errors.As(err, &ee):
		// The command said nothing of its own about the work: say that
		// it was interrupted, without the context's Go words.
		fmt.Fprintln(stderr, prefixed(args, sig))
		return sig.exitCode()
	case errors.As(err, &ee):
		if ee.err != nil && ee.err.Error() != "" {
			fmt.Fprintln(stderr, prefixed(args, ee.err))
		}
		return ee.code
	default:
		fmt.Fprintln(stderr, prefixed(args, err))
		return 1
	}
}

// flagsFirst is the refusal of a line that starts with a flag (`captchaq
// --nats URL stats`): flags go after the command, and when a command is
// named further on, the line as it should be typed.
func flagsFirst(args []string) string {
	for i, a := range args {
		if _, ok := commands[a]; ok && i > 0 {
			fixed := append(append([]string{a}, args[i+1:]...), args[:i]...)
			return fmt.Sprintf("captchaq: %q before the command: flags go after the command: captchaq %s", args[0], strings.Join(fixed, " "))
		}
	}
	return fmt.Sprintf("captchaq: %q before any command: flags go after the command (captchaq COMMAND %s); run `captchaq help` for the commands", args[0], args[0])
}

// prefixed is err's message after one "captchaq COMMAND: " (COMMAND with
// its verb, for the commands that take one): a message that already starts
// with the command's name ("dead show: want one task id") does not get it
// twice.
func prefixed(args []string, err error) string {
	name := args[0]
	if verbs, ok := verbGroups[name]; ok && len(args) > 1 {
		for _, v := range verbs {
			if v.name == args[1] {
				name += " " + v.name
			}
		}
	}
	msg := err.Error()
	var se *solver.Error
	if errors.As(err, &se) {
		msg = strings.Replace(msg, se.Error(), serviceWords(se), 1)
	}
	for _, p := range []string{name + ": ", args[0] + ": "} {
		if rest, ok := strings.CutPrefix(msg, p); ok {
			msg = rest
			break
		}
	}
	return "captchaq " + name + ": " + msg
}

// buildVersion, when the build sets it (go build -ldflags "-X
// main.buildVersion=v1.4.0"), is the version captchaq reports.
var buildVersion string

// version is the version the build was given, else the module's version
// (go install …@v1.4.0), else the commit it was built from (a checkout, with
// "+dirty" when it had changes), and the Go version.
func version() string {
	bi, ok := debug.ReadBuildInfo()
	if buildVersion != "" {
		if ok {
			return buildVersion + " (" + bi.GoVersion + ")"
		}
		return buildVersion
	}
	if !ok {
		return "(unknown version)"
	}
	v := bi.Main.Version
	var rev, dirty string
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	if (v == "" || v == "(devel)") && rev != "" {
		v = "commit " + rev[:min(12, len(rev))] + dirty
	}
	if v == "" {
		v = "(devel)"
	}
	return v + " (" + bi.GoVersion + ")"
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "captchaq: a durable CAPTCHA-solving queue on NATS JetStream\n\nUsage: captchaq COMMAND [flags]\n\nCommands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nEvery flag can also be set by an environment variable CAPTCHAQ_<FLAG> (--solver-url: CAPTCHAQ_SOLVER_URL);\nthe API key comes from CAPTCHAAI_API_KEY or --key-file, never from a flag value.\nRun `captchaq help COMMAND` (or `captchaq COMMAND --help`) for a command's flags; `captchaq --version` for the version.")
}

// serviceWords is a solving service's error as a user reads it: what
// happened, then the service's code and words, without the retry class the
// workers act on.
func serviceWords(e *solver.Error) string {
	var what string
	switch e.Code {
	case solver.CodeUnreachable:
		what = "the solving service cannot be reached"
	case solver.CodeNetwork:
		what = "no answer from the solving service"
	case classic.CodeWrongUserKey, classic.CodeKeyDoesNotExist:
		what = "the solving service refused the API key (" + e.Code + ")"
	default:
		what = "the solving service answered " + e.Code
	}
	msg := e.Op + ": " + what
	if e.Text != "" {
		msg += ": " + e.Text
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// newFlagSet returns a flag set whose usage lists each flag's environment
// variable. The usage goes to stdout (help asked for is output: `captchaq
// worker --help | less`); errors are one line on stderr (parseFlags).
func newFlagSet(name, synopsis string, stdout io.Writer) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stdout)
	fs.Usage = func() {
		fmt.Fprintf(stdout, "Usage: captchaq %s %s\n\nFlags (each also from its environment variable):\n", name, synopsis)
		fs.VisitAll(func(f *flag.Flag) {
			def := ""
			if f.DefValue != "" && f.DefValue != "false" && f.DefValue != "0" && f.DefValue != "0s" && !strings.Contains(f.Usage, "(default") {
				def = fmt.Sprintf(" (default %s)", f.DefValue)
			}
			env := envName(f.Name)
			if typedOnly(name, f.Name) {
				env = "no environment variable: type it"
			}
			fmt.Fprintf(stdout, "  --%s  [%s]\n      %s%s\n", f.Name, env, f.Usage, def)
		})
	}
	return fs
}

// envName is the environment variable of a flag: CAPTCHAQ_ and the flag's
// name in upper snake case.
// storeKeyEnv holds the key that encrypts the JetStream store at rest
// (`captchaq server` and `run`; the shipped nats.conf reads it too). Only the
// environment sets it: a flag value shows in ps.
const storeKeyEnv = "CAPTCHAQ_STORE_KEY"

func envName(flagName string) string {
	return "CAPTCHAQ_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// flagSetParsed, when set (by tests), sees every flag set parseFlags parsed.
var flagSetParsed func(*flag.FlagSet)

// noEnv are flags no environment variable may set: confirmations must be
// typed, and so must what a destructive verb selects ("dead purge
// --method"): a variable left exported for a listing must not widen, narrow
// or refuse what a purge or a replay acts on. A key is a flag's name (every
// command) or a command and a flag ("dead purge --since").
var noEnv = map[string]bool{"yes": true, "all": true,
	"dead purge --method": true, "dead purge --reason": true, "dead purge --since": true,
	"dead replay --method": true, "dead replay --reason": true, "dead replay --since": true}

// typedOnly says whether flag flagName of command (a flag set's name) is
// taken from the command line only.
func typedOnly(command, flagName string) bool {
	return noEnv[flagName] || noEnv[command+" --"+flagName]
}

// parseFlags sets every flag from its environment variable, then from args:
// the command line wins.
func parseFlags(fs *flag.FlagSet, args []string) error {
	if flagSetParsed != nil {
		defer flagSetParsed(fs)
	}
	var errs []error
	fs.VisitAll(func(f *flag.Flag) {
		if typedOnly(fs.Name(), f.Name) {
			return
		}
		if v, ok := os.LookupEnv(envName(f.Name)); ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s=%q: %w", envName(f.Name), v, err))
			}
		}
	})
	if len(errs) > 0 {
		return &exitError{code: 2, err: errors.Join(errs...)}
	}
	// Flags may come before, between or after the arguments (`dead show ID
	// --json`): parse, set the first leftover argument aside, go on. A "--"
	// ends the flags as usual.
	// The flag package prints its error and the whole usage on a bad flag;
	// the caller prints one line instead (flagError), and the usage only
	// when asked for.
	usage, out := fs.Usage, fs.Output()
	fs.Usage = func() {}
	fs.SetOutput(io.Discard)
	defer func() { fs.Usage = usage; fs.SetOutput(out) }()
	var positional []string
	for {
		if err := fs.Parse(args); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage()
				return err
			}
			return flagError(fs, err)
		}
		rest := fs.Args()
		if len(rest) == 0 {
			break
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			positional = append(positional, rest...)
			break
		}
		positional, args = append(positional, rest[0]), rest[1:]
	}
	// Leave the arguments where fs.Arg and fs.NArg find them.
	return fs.Parse(append([]string{"--"}, positional...))
}

// dashFlag finds the flag package's spelling of a flag name, "-name".
var dashFlag = regexp.MustCompile(`(^|[\s:])-([A-Za-z0-9][A-Za-z0-9_-]*)`)

// flagError is a bad flag or flag value as one line: the flag spelled
// --name as the usage spells it, and where to read more.
func flagError(fs *flag.FlagSet, err error) error {
	msg := err.Error()
	if m := badValue.FindStringSubmatch(msg); m != nil {
		if f := fs.Lookup(m[1]); f != nil {
			msg = strings.TrimSuffix(msg, "parse error") + wantedValue(f.Value)
		}
	}
	msg = dashFlag.ReplaceAllString(msg, "$1--$2")
	return &exitError{code: 2, err: fmt.Errorf("%s (see captchaq %s --help)", msg, fs.Name())}
}

// badValue is the flag package's words for a value its type cannot parse.
var badValue = regexp.MustCompile(`^invalid value ".*" for flag -([A-Za-z0-9_-]+): parse error$`)

// wantedValue says what a flag of v's type takes, in place of the flag
// package's bare "parse error".
func wantedValue(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return "parse error"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "want a duration such as 90s, 15m or 2h"
	case int, int64, uint, uint64:
		return "want a whole number"
	case float64:
		return "want a number"
	case bool:
		return "want true or false"
	}
	return "parse error"
}

// parseArgs parses args into fs (parseFlags) and refuses more than n
// arguments after the flags (wantArgs), the way every command starts.
func parseArgs(fs *flag.FlagSet, args []string, n int) error {
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	return wantArgs(fs, n)
}

// wantArgs refuses a command line with more arguments than the command
// takes (n; 0 for none), naming the ones it does not take, before the
// command does anything.
func wantArgs(fs *flag.FlagSet, n int) error {
	if fs.NArg() <= n {
		return nil
	}
	extra := fs.Args()[n:]
	quoted := make([]string, len(extra))
	for i, a := range extra {
		quoted[i] = strconv.Quote(a)
	}
	what := "no arguments"
	if n > 0 {
		what = fmt.Sprintf("%d argument(s)", n)
	}
	s := ""
	if len(extra) > 1 {
		s = "s"
	}
	return usageError("%s: unexpected argument%s %s: it takes %s (see captchaq %s --help)", fs.Name(), s, strings.Join(quoted, " "), what, fs.Name())
}

// usageError is a wrong command line: exit code 2.
func usageError(format string, args ...any) error {
	return &exitError{code: 2, err: fmt.Errorf(format, args...)}
}

// addFlags registers a group of flags several commands take (natsFlags,
// logFlags, solverFlags, …) on fs and returns it, to read after parsing.
func addFlags[G any, P interface {
	*G
	register(*flag.FlagSet)
}](fs *flag.FlagSet) P {
	g := P(new(G))
	g.register(fs)
	return g
}

// logFlags are the logging flags every long-running command takes.
type logFlags struct {
	format, level string
}

func (l *logFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&l.format, "log-format", "text", "log format: text or json")
	fs.StringVar(&l.level, "log-level", "info", "log level: debug, info, warn or error")
}

func (l *logFlags) logger(w io.Writer) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(l.level)); err != nil {
		return nil, usageError("--log-level %q: want debug, info, warn or error", l.level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch l.format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, usageError("--log-format %q: want text or json", l.format)
}

// parseArgs is parseArgs for a long-running command: it parses args into
// fs, which l is registered on, and returns the logger l asks for, writing
// to w.
func (l *logFlags) parseArgs(fs *flag.FlagSet, args []string, n int, w io.Writer) (*slog.Logger, error) {
	if err := parseArgs(fs, args, n); err != nil {
		return nil, err
	}
	return l.logger(w)
}

package main

import (
	"context"
	"flag"
	"io"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// every command line to look at: each command, each dead subcommand, and
// the commands main.go may not list yet.
func commandLines() map[string]command {
	out := map[string]command{}
	for name, c := range commands {
		if verbs, ok := verbGroups[name]; ok {
			for _, v := range verbs {
				out[name+" "+v.name] = command{run: func(ctx context.Context, args []string, stdout, stderr io.Writer) error {
					return c.run(ctx, append([]string{v.name}, args...), stdout, stderr)
				}}
			}
			continue
		}
		out[name] = c
	}
	for name, run := range map[string]func(context.Context, []string, io.Writer, io.Writer) error{"init": runInit, "passwd": runPasswd} {
		if _, ok := out[name]; !ok {
			out[name] = command{run: run}
		}
	}
	return out
}

// helpFlags runs a command with --help and returns the flag set it parsed
// and what its usage printed.
func helpFlags(t *testing.T, c command) (*flag.FlagSet, string) {
	t.Helper()
	var fs *flag.FlagSet
	flagSetParsed = func(f *flag.FlagSet) { fs = f }
	defer func() { flagSetParsed = nil }()
	var out strings.Builder
	err := c.run(context.Background(), []string{"--help"}, &out, io.Discard)
	require.ErrorIs(t, err, flag.ErrHelp)
	require.NotNil(t, fs)
	return fs, out.String()
}

// TestEveryFlagHasItsEnvironmentVariable sets every flag of every command
// from its CAPTCHAQ_* variable and checks that the command sees the value,
// and that --help names the variable. Not parallel: it sets the environment.
func TestEveryFlagHasItsEnvironmentVariable(t *testing.T) {
	lines := commandLines()
	names := make([]string, 0, len(lines))
	for n := range lines {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		t.Run(strings.ReplaceAll(name, " ", "_"), func(t *testing.T) {
			c := lines[name]
			probe, usage := helpFlags(t, c)
			want := map[string]string{}
			probe.VisitAll(func(f *flag.Flag) {
				if typedOnly(probe.Name(), f.Name) {
					// A confirmation: typed, never taken from the environment.
					require.Contains(t, usage, "--"+f.Name+"  [no environment variable")
					t.Setenv(envName(f.Name), "true")
					want[f.Name] = f.DefValue
					return
				}
				require.Contains(t, usage, "--"+f.Name+"  ["+envName(f.Name)+"]", "--help names the variable of --%s", f.Name)
				// A value the flag takes that differs from its default.
				for _, v := range []string{"17", "17s", "0.25", "k=v", "from-env", "true", "false"} {
					if f.Value.Set(v) == nil && (f.Value.String() != f.DefValue || f.Value.String() == "") {
						want[f.Name] = f.Value.String()
						t.Setenv(envName(f.Name), v)
						return
					}
				}
				t.Fatalf("no test value for --%s", f.Name)
			})
			require.NotEmpty(t, want, "%s has flags", name)
			got, _ := helpFlags(t, c)
			for flagName, v := range want {
				require.Equal(t, v, got.Lookup(flagName).Value.String(), "%s --%s from %s", name, flagName, envName(flagName))
			}
		})
	}
}

func TestFlagBeatsEnvironment(t *testing.T) {
	t.Setenv("CAPTCHAQ_THREADS", "3")
	var fs *flag.FlagSet
	flagSetParsed = func(f *flag.FlagSet) { fs = f }
	defer func() { flagSetParsed = nil }()
	_ = runWorker(context.Background(), []string{"--threads", "9", "--help"}, io.Discard, io.Discard)
	require.Equal(t, "9", fs.Lookup("threads").Value.String())

	t.Setenv("CAPTCHAQ_THREADS", "many")
	err := runWorker(context.Background(), nil, io.Discard, io.Discard)
	require.ErrorContains(t, err, `CAPTCHAQ_THREADS="many"`)
}

package main

import (
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/captchaq/captchaq/stream"
)

// subcommand is one verb of a command that has several (dead, task, lane,
// workers): its synopsis and what it does.
type subcommand struct {
	name, synopsis, summary string
}

// pickSubcommand takes the verb off args. With none, an unknown one, or a
// request for help (`dead --help`, `dead help`, `help dead`) it prints the
// command's verbs and returns flag.ErrHelp (help) or a usage error.
func pickSubcommand(command string, subs []subcommand, args []string, stdout io.Writer) (string, []string, error) {
	list := func(w io.Writer) {
		fmt.Fprintf(w, "Usage:\n")
		for _, s := range subs {
			fmt.Fprintf(w, "  captchaq %s %s %s\n      %s\n", command, s.name, s.synopsis, s.summary)
		}
		fmt.Fprintf(w, "\nRun `captchaq %s VERB --help` for a verb's flags.\n", command)
	}
	if len(args) == 0 {
		var b strings.Builder
		list(&b)
		return "", nil, usageError("%s: want a verb\n%s", command, strings.TrimRight(b.String(), "\n"))
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		if len(args) > 1 && args[0] == "help" {
			return args[1], []string{"--help"}, nil
		}
		list(stdout)
		return "", nil, flag.ErrHelp
	}
	for _, s := range subs {
		if s.name == args[0] {
			return args[0], args[1:], nil
		}
	}
	names := make([]string, len(subs))
	for i, s := range subs {
		names[i] = s.name
	}
	return "", nil, usageError("%s: unknown verb %q: want one of %s (see captchaq %s --help)", command, args[0], strings.Join(names, ", "), command)
}

// synopsisOf is the synopsis of verb name.
func synopsisOf(subs []subcommand, name string) string {
	for _, s := range subs {
		if s.name == name {
			return s.synopsis
		}
	}
	return "[flags]"
}

// verbFlagSet takes the verb off args (pickSubcommand) and returns it, its
// flag set with the connection flags, and the rest of args: how every
// command with verbs starts.
func verbFlagSet(command string, subs []subcommand, args []string, stdout io.Writer) (string, *flag.FlagSet, *natsFlags, []string, error) {
	sub, args, err := pickSubcommand(command, subs, args, stdout)
	if err != nil {
		return "", nil, nil, nil, err
	}
	fs := newFlagSet(command+" "+sub, synopsisOf(subs, sub), stdout)
	return sub, fs, addFlags[natsFlags](fs), args, nil
}

// validateIDs checks every task id a verb acts on before it acts on any: a
// bad one is a usage error that ends with what was not done (nothing).
func validateIDs(ids []string, nothing string) error {
	for _, id := range ids {
		if err := stream.ValidateID(id); err != nil {
			return usageError("%v; %s", err, nothing)
		}
	}
	return nil
}

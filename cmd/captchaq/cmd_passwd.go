package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/crypto/bcrypt"
	"golang.org/x/term"
)

// runPasswd prints the bcrypt hash of a password for nats.conf's
// CAPTCHAQ_*_PASSWORD_HASH variables. The password comes from standard input
// (never from a flag, which ps shows) or is generated.
func runPasswd(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("passwd", "[--generate] < password", stdout)
	generate := fs.Bool("generate", false, "make a random password; print it on the first line and its hash on the second")
	cost := fs.Int("cost", 11, "bcrypt cost: each step doubles the work of checking a password at connect")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if err := wantArgs(fs, 0); err != nil {
		return err
	}
	if *cost < bcrypt.MinCost || *cost > bcrypt.MaxCost {
		return usageError("--cost %d: want %d to %d", *cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	var pw string
	if *generate {
		pw = rand.Text() // 26 base32 characters: 130 bits
	} else if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		// Typed at a terminal: not echoed, and typed twice.
		var err error
		if pw, err = readSecret(fd, stderr, "Password: "); err != nil {
			return err
		}
		if pw == "" {
			return usageError("empty password (or use --generate)")
		}
		again, err := readSecret(fd, stderr, "Again: ")
		if err != nil {
			return err
		}
		if again != pw {
			return fmt.Errorf("the two passwords differ; nothing printed")
		}
	} else {
		line, err := bufio.NewReader(os.Stdin).ReadString('\n')
		if err != nil && err != io.EOF {
			return fmt.Errorf("read the password from standard input: %w", err)
		}
		pw = strings.TrimRight(line, "\r\n")
		if pw == "" {
			return usageError("no password on standard input (or use --generate)")
		}
	}
	h, err := bcrypt.GenerateFromPassword([]byte(pw), *cost)
	if err != nil {
		return fmt.Errorf("hash: %w", err)
	}
	if *generate {
		fmt.Fprintln(stdout, pw)
	}
	fmt.Fprintln(stdout, string(h))
	return nil
}

// readSecret prompts on w and reads a line from the terminal fd without
// echoing it.
func readSecret(fd int, w io.Writer, prompt string) (string, error) {
	fmt.Fprint(w, prompt)
	b, err := term.ReadPassword(fd)
	fmt.Fprintln(w)
	if err != nil {
		return "", fmt.Errorf("read the password from the terminal: %w", err)
	}
	return strings.TrimRight(string(b), "\r\n"), nil
}

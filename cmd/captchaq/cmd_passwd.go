package main

import (
	"bufio"
	"context"
	"crypto/rand"
	"errors"
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
	if err := parseArgs(fs, args, 0); err != nil {
		return err
	}
	if *cost < bcrypt.MinCost || *cost > bcrypt.MaxCost {
		return usageError("--cost %d: want %d to %d", *cost, bcrypt.MinCost, bcrypt.MaxCost)
	}
	var pw string
	if *generate {
		pw = rand.Text() // 26 base32 characters: 130 bits
	} else if fd := int(os.Stdin.Fd()); term.IsTerminal(fd) {
		// Typed at a terminal: not echoed, and typed twice. The terminal
		// stops echoing before the first prompt shows, so that nothing
		// typed after it appears on the screen.
		state, err := term.MakeRaw(fd)
		if err != nil {
			return fmt.Errorf("read the password from the terminal: %w", err)
		}
		pw, err = readSecret(os.Stdin, stderr, "Password: ")
		var again string
		if err == nil && pw != "" {
			again, err = readSecret(os.Stdin, stderr, "Again: ")
		}
		_ = term.Restore(fd, state)
		if err != nil {
			return err
		}
		if pw == "" {
			return usageError("empty password (or use --generate)")
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

// readSecret prompts on w and reads a line from r, a terminal in raw mode
// (no echo): Enter ends it, Backspace takes back a character, Ctrl-C and
// Ctrl-D give up.
func readSecret(r io.Reader, w io.Writer, prompt string) (string, error) {
	fmt.Fprint(w, prompt)
	defer fmt.Fprint(w, "\r\n") // raw mode: no carriage return of its own
	var line []byte
	b := make([]byte, 1)
	for {
		n, err := r.Read(b)
		if err != nil {
			return "", fmt.Errorf("read the password from the terminal: %w", err)
		}
		if n == 0 {
			continue
		}
		switch b[0] {
		case '\r', '\n':
			return string(line), nil
		case 0x03, 0x04: // Ctrl-C, Ctrl-D
			return "", &exitError{code: 130, err: errors.New("no password typed")}
		case 0x7f, 0x08: // Backspace
			if len(line) > 0 {
				line = line[:len(line)-1]
			}
		default:
			line = append(line, b[0])
		}
	}
}

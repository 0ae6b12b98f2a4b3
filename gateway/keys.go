package gateway

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"
	"time"
	"unicode"

	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/stream"
)

// Key is one caller of the gateway: the secret it sends as `key`, and what
// its tasks get.
type Key struct {
	// Key is the secret the caller sends in place of the service's key: at
	// least 16 characters, printable, without spaces or control
	// characters (a caller sends it in a query or a form field).
	Key string `json:"key"`
	// Producer names the caller: its tasks carry it as their producer
	// (the dashboard and trace show it) and their ids start with it.
	// Letters, digits and '_', at most 24 characters.
	Producer string `json:"producer"`
	// Priority is the priority of the caller's tasks that name none
	// (in.php's priority parameter): "high" or "normal" (default).
	Priority stream.Priority `json:"priority,omitempty"`
	// Deadline is how long the caller's tasks stay useful when in.php names
	// no deadline parameter, like "5m"; default the producer's default (10
	// minutes). At least MinKeyDeadline.
	Deadline Duration `json:"deadline,omitempty"`
	// Share is the part of the plan's threads the caller's unfinished tasks
	// may hold at once, from 0 (exclusive) to 1; 0 means no limit. Over it,
	// in.php answers ERROR_NO_SLOT_AVAILABLE, which callers retry later,
	// so one caller's backlog never queues ahead of every other caller's
	// tasks.
	Share float64 `json:"share,omitempty"`
	// Client names the family of JSON clients the key's createTask and
	// getTaskResult replies are shaped for: none for Anti-Captcha's,
	// CapMonster Cloud's and 2captcha's (taskId a number), "capsolver"
	// for CapSolver's (taskId a string, errorId 1 for every error). The
	// classic dialect is the same for both.
	Client createtask.Family `json:"client,omitempty"`
}

// Duration is a time.Duration written as text ("90s", "5m") in the key file.
type Duration time.Duration

// UnmarshalJSON reads "90s", "5m" and the like.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration like \"5m\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration as text.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

var producerPattern = regexp.MustCompile(`^[A-Za-z0-9_]{1,24}$`)

// MinKeyDeadline is the shortest Key.Deadline: a captcha the service
// solves fastest (an image) takes seconds, a token minutes, so a shorter
// default would end every task of the key before a worker could solve it.
const MinKeyDeadline = 30 * time.Second

// Validate says what is wrong with a key, naming the field. The secret
// itself is never in the error.
func (k Key) Validate() error {
	switch {
	case len(k.Key) < 16:
		return errors.New("key: at least 16 characters")
	case strings.TrimSpace(k.Key) == "":
		return errors.New("key: blank")
	case strings.IndexFunc(k.Key, func(r rune) bool { return r <= ' ' || r == 0x7f || !unicode.IsPrint(r) }) >= 0:
		return errors.New("key: holds a space or a control character")
	case !producerPattern.MatchString(k.Producer):
		return fmt.Errorf("producer %q: 1 to 24 letters, digits or '_'", k.Producer)
	case k.Priority != "" && k.Priority != stream.PriorityHigh && k.Priority != stream.PriorityNormal:
		return fmt.Errorf("priority %q: want %q or %q", k.Priority, stream.PriorityHigh, stream.PriorityNormal)
	case k.Deadline < 0:
		return fmt.Errorf("deadline %s: negative", time.Duration(k.Deadline))
	case k.Deadline != 0 && time.Duration(k.Deadline) < MinKeyDeadline:
		return fmt.Errorf("deadline %s: shorter than %s, every task would die before it is solved", time.Duration(k.Deadline), MinKeyDeadline)
	case k.Share < 0 || k.Share > 1:
		return fmt.Errorf("share %g: want 0 (no limit) to 1", k.Share)
	}
	return k.Client.Validate()
}

// keyFile is the key file's shape.
type keyFile struct {
	Keys []Key `json:"keys"`
}

// ParseKeys reads a key file: {"keys": [{"key": "…", "producer": "crawler",
// "priority": "high", "deadline": "5m", "share": 0.5, "client":
// "capsolver"}, …]}. Unknown fields, a bad key, and a key or producer named
// twice are errors naming the entry.
func ParseKeys(b []byte) ([]Key, error) {
	var f keyFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("key file: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("key file: data after the JSON object at byte %d", dec.InputOffset())
	}
	if len(f.Keys) == 0 {
		return nil, errors.New("key file: no keys")
	}
	secrets, producers := map[[32]byte]bool{}, map[string]bool{}
	for i, k := range f.Keys {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("key file: keys[%d]: %w", i, err)
		}
		h := sha256.Sum256([]byte(k.Key))
		if secrets[h] {
			return nil, fmt.Errorf("key file: keys[%d] (producer %s): the same key as an earlier entry", i, k.Producer)
		}
		if producers[k.Producer] {
			return nil, fmt.Errorf("key file: keys[%d]: producer %s named twice", i, k.Producer)
		}
		secrets[h], producers[k.Producer] = true, true
	}
	return f.Keys, nil
}

// LoadKeys reads and parses a key file (ParseKeys).
func LoadKeys(path string) ([]Key, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	keys, err := ParseKeys(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return keys, nil
}

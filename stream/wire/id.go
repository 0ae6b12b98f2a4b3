package wire

import (
	"fmt"
	"regexp"
)

// MaxIDLength is the longest task id.
const MaxIDLength = 64

var idPattern = regexp.MustCompile(`^[A-Za-z0-9_-]+$`)

// ValidateID reports whether id can name a task: 1 to 64 characters of
// A–Z, a–z, 0–9, '_' and '-' (it becomes a subject token).
func ValidateID(id string) error {
	switch {
	case id == "":
		return fmt.Errorf("id: empty")
	case len(id) > MaxIDLength:
		return fmt.Errorf("id: %d characters, at most %d", len(id), MaxIDLength)
	case !idPattern.MatchString(id):
		return fmt.Errorf("id %q: only letters, digits, '_' and '-' are allowed", id)
	}
	return nil
}

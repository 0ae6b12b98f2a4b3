package wire

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"
)

// CancelRecord asks workers not to solve one submission of a task, as
// stored on captcha.cancels.<id>.<gen>[.admin]. It is part of the wire
// contract.
type CancelRecord struct {
	// ID is the task's id.
	ID string `json:"id"`
	// Gen is the generation (task message sequence) it cancels; a later
	// submission or replay of the id is not canceled.
	Gen uint64 `json:"gen"`
	// At is when it was asked.
	At time.Time `json:"at"`
	// By names the client that asked (stream.ClientConfig.Name).
	By string `json:"by,omitempty"`
	// Reason says why, in a few words ("interrupted", "operator").
	Reason string `json:"reason,omitempty"`
	// Secret proves an owner's record: its SHA-256 is the task message's
	// Captchaq-Cancel-Hash. Empty on an admin's record.
	Secret string `json:"secret,omitempty"`
}

// ParseCancel reads a cancel record of generation gen; nil when b is not one.
func ParseCancel(b []byte, gen uint64) *CancelRecord {
	var rec CancelRecord
	if json.Unmarshal(b, &rec) != nil || rec.Gen != gen {
		return nil
	}
	return &rec
}

// OwnsCancel reports whether secret cancels a task message with headers h.
func OwnsCancel(h map[string][]string, secret string) bool {
	want := header(h, HeaderCancelHash)
	if want == "" || secret == "" {
		return false
	}
	sum := sha256.Sum256([]byte(secret))
	return subtle.ConstantTimeCompare([]byte(hex.EncodeToString(sum[:])), []byte(strings.ToLower(want))) == 1
}

// ReplayCancelHashOK reports whether a replay whose task message names
// cancel hash replay stands for a dead letter that names letter: exactly
// the same hash (none for none), so that the task's owner, and only it,
// may cancel the replay. Any other hash would let whoever holds its secret
// cancel a task that is not theirs; none, where the letter names one,
// would let anyone who may submit (a hand replay takes the replay's
// message id) put the task beyond its owner's cancel, to be solved and
// paid for after the owner canceled it.
func ReplayCancelHashOK(letter, replay string) bool {
	return replay == letter
}

// NewCancelKey returns a fresh secret and the hash a task message carries
// for it.
func NewCancelKey() (secret, hash string) {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	secret = hex.EncodeToString(b)
	sum := sha256.Sum256([]byte(secret))
	return secret, hex.EncodeToString(sum[:])
}

// CancelDetail is the dead letter's detail of a canceled generation.
func CancelDetail(rec *CancelRecord) string {
	detail := "canceled"
	if rec.By != "" {
		detail += " by " + rec.By
	}
	if rec.Reason != "" {
		detail += ": " + rec.Reason
	}
	return detail
}

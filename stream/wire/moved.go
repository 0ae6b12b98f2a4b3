// Moving a task between its task subject and the waiting room: the copy a
// worker publishes carries the generation it belongs to and the store time
// of the submission, and is the generation's only when a worker's
// scheduled event names its digest.

package wire

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"net/textproto"
	"strconv"
	"strings"
	"time"
)

// HeaderSubmitted is when the submission a moved copy of a task belongs to
// was stored (RFC 3339 with nanoseconds, UTC, on the broker's clock), on
// moved copies: durations in use_at, not_before and the default deadline
// count from it, not from the copy's own store time.
const HeaderSubmitted = "Captchaq-Submitted"

// MovedHeader is the header of the copy of task message (subject, h, body)
// of generation gen, stored at submitted, that a worker publishes on
// subject to, with the same body: the producer's headers, the generation
// (HeaderGen), the store time (HeaderSubmitted), and a message id derived
// from the sequence of the message it moves (from), so that a worker that
// publishes it again (it stopped before it acked that message) stores no
// second copy within the duplicate window. h is left as it was.
func MovedHeader(to string, h map[string][]string, gen uint64, submitted time.Time, from uint64) map[string][]string {
	m := make(map[string][]string, len(h)+3)
	for k, v := range h {
		switch ck := textproto.CanonicalMIMEHeaderKey(k); {
		case strings.HasPrefix(ck, "Nats-"), ck == HeaderGen, ck == HeaderSubmitted:
			continue
		}
		m[k] = v
	}
	m[HeaderGen] = []string{strconv.FormatUint(gen, 10)}
	m[HeaderSubmitted] = []string{submitted.UTC().Format(time.RFC3339Nano)}
	m[HeaderMsgID] = []string{MovedMsgID(IDFromSubject(to), from)}
	return m
}

// MovedMsgID is the message id of the copy of task id that moves message
// from: a task id is a subject token and holds no dot, so no submission
// takes it.
func MovedMsgID(id string, from uint64) string {
	return id + ".moved." + strconv.FormatUint(from, 10)
}

// IsMovedCopy reports whether a task message says it is a moved copy (it
// names a generation and its store time): whether it is one, its digest
// says (MovedDigest). A message with one of the two headers alone is
// refused as forged (CheckEnvelopeHeaders).
func IsMovedCopy(h map[string][]string) bool {
	return header(h, HeaderGen) != "" && header(h, HeaderSubmitted) != ""
}

// MovedFrom reads what a moved copy says of itself: its generation and
// when that submission was stored; ok is false when either is not well
// formed.
func MovedFrom(h map[string][]string) (gen uint64, submitted time.Time, ok bool) {
	gen, err := strconv.ParseUint(header(h, HeaderGen), 10, 64)
	if err != nil || gen == 0 {
		return 0, time.Time{}, false
	}
	submitted, err = time.Parse(time.RFC3339Nano, header(h, HeaderSubmitted))
	if err != nil {
		return 0, time.Time{}, false
	}
	return gen, submitted, true
}

// MovedDigest is the digest of what a task message of generation gen says
// of the task, whether on its task subject or in the waiting room: its
// task subject (lane, priority, id), its body, the headers a worker acts on
// (id, client, cancel hash, replay), and when its submission was stored.
// The worker that first moves a generation records it on its scheduled
// event (Event.Digest); a copy whose digest no scheduled event of its
// generation names is not the generation's.
func MovedDigest(subject string, h map[string][]string, body []byte, gen uint64, submitted time.Time) string {
	d := sha256.New()
	field := func(h hash.Hash, b []byte) {
		var n [8]byte
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	field(d, []byte(TaskSubjectOf(subject)))
	field(d, body)
	for _, k := range []string{HeaderTaskID, HeaderClient, HeaderCancelHash, HeaderReplayedBy} {
		field(d, []byte(header(h, k)))
	}
	field(d, []byte(strconv.FormatUint(gen, 10)))
	field(d, []byte(submitted.UTC().Format(time.RFC3339Nano)))
	return hex.EncodeToString(d.Sum(nil))
}

// TaskMessageGen is the generation and the submission time of a task
// message stored at seq and at, on a task subject or in the waiting room:
// a moved copy (MovedHeader) names those of the submission it copies,
// any other message is its own. Readers take a copy at its word; workers
// check it against the generation's scheduled event.
func TaskMessageGen(h map[string][]string, seq uint64, at time.Time) (uint64, time.Time) {
	if gen, submitted, ok := MovedFrom(h); ok && gen < seq {
		return gen, submitted
	}
	return seq, at
}

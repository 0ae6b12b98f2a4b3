package wire

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// Distinct worker names never share a heartbeat subject: a worker that
// reads another's heartbeat as its own name's would take a dead holder for
// a live one (or the reverse). Each subject is one token of at most
// MaxIDLength characters, and a name of letters, digits, '_' and '-' keeps
// the subject it always had.
func TestHeartbeatSubjectDistinctNames(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("w", MaxIDLength)
	names := []string{"a.b", "a_b", "a b", "a*b", "a>b", "a%2Eb", "a%b", "a~b", "a-b", "ab", "hb.worker 1", "hb_worker_1", "ä",
		long, long + "1", long + "2", long[:MaxIDLength-1] + ".", long[:MaxIDLength-1] + "_"}
	seen := map[string]string{}
	for _, n := range names {
		subj := HeartbeatSubject(n)
		tok, ok := strings.CutPrefix(subj, SubjectWorkers+".")
		require.True(t, ok, subj)
		require.LessOrEqual(t, len(tok), MaxIDLength, "%q: %s", n, subj)
		require.NotEmpty(t, tok, n)
		require.False(t, strings.ContainsAny(tok, ". *>\t\r\n"), "%q: %s is not one token", n, subj)
		if prev, ok := seen[subj]; ok {
			t.Errorf("worker names %q and %q share the heartbeat subject %s", prev, n, subj)
		}
		seen[subj] = n
	}
	require.Equal(t, "captcha.workers.worker_1-A", HeartbeatSubject("worker_1-A"))
	require.Equal(t, "captcha.workers."+long, HeartbeatSubject(long))
}

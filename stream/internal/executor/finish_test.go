package executor

import (
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/stream/wire"
)

// A dead letter keeps what the producer says of its own task (its name,
// its cancel hash, headers of its own) and none of the headers JetStream,
// the workers and replays set, whatever the producer put there.
func TestDeadLetterKeepsOnlyTheProducersHeaders(t *testing.T) {
	src := nats.Header{}
	for _, k := range []string{wire.HeaderTaskID, wire.HeaderGen, wire.HeaderAttempts, wire.HeaderError, wire.HeaderReason,
		wire.HeaderDetail, wire.HeaderBodyOmitted, wire.HeaderSubject, wire.HeaderFirstFail, wire.HeaderLastFail,
		wire.HeaderDeadSeq, wire.HeaderReplayedBy, wire.HeaderAttemptSeq, wire.HeaderTokenSeq, wire.HeaderSubmitted,
		wire.HeaderMsgID, wire.HeaderNatsTTL, "Nats-Expected-Last-Sequence"} {
		src.Set(k, "forged")
	}
	src["captchaq-reason"] = []string{"forged, not canonical"}
	src.Set(wire.HeaderClient, "shop")
	src.Set(wire.HeaderCancelHash, "ab12")
	src.Set("X-Trace", "abc")

	dst := nats.Header{}
	copyProducerHeaders(dst, src)
	require.Equal(t, nats.Header{wire.HeaderClient: {"shop"}, wire.HeaderCancelHash: {"ab12"}, "X-Trace": {"abc"}}, dst)
}

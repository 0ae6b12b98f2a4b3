package wire

// Header names carried by captchaq's messages. They are part of the wire
// contract; each says which messages carry it.
const (
	// HeaderTaskID is the task's id, on task messages, outcomes and dead
	// letters.
	HeaderTaskID = "Captchaq-Task-Id"
	// HeaderGen is the stream sequence (decimal) of the task message an
	// outcome or dead letter belongs to: which submission of the id it ends.
	// On a task message a worker moved to the waiting room or back (a moved
	// copy, MovedHeader), the submission it is a copy of.
	HeaderGen = "Captchaq-Gen"
	// HeaderAttempts is the number of attempts spent (decimal), on dead
	// letters.
	HeaderAttempts = "Captchaq-Attempts"
	// HeaderError is the code of the last failure, on dead letters (see
	// Outcome.Error).
	HeaderError = "Captchaq-Error"
	// HeaderReason is the retry.Reason, on dead letters.
	HeaderReason = "Captchaq-Reason"
	// HeaderDetail says more about a dead task in words (Outcome.Detail),
	// on dead letters that have it.
	HeaderDetail = "Captchaq-Detail"
	// HeaderBodyOmitted, on a dead letter, is the size in bytes of the task
	// message's body that the letter leaves out: the task was too large to
	// be dead-lettered whole.
	HeaderBodyOmitted = "Captchaq-Body-Omitted"
	// HeaderSubject is the task subject the task was delivered on, on dead
	// letters.
	HeaderSubject = "Captchaq-Subject"
	// HeaderFirstFail is when the task first failed (RFC 3339, UTC), on dead
	// letters.
	HeaderFirstFail = "Captchaq-First-Failure"
	// HeaderLastFail is when the task last failed (RFC 3339, UTC), on dead
	// letters.
	HeaderLastFail = "Captchaq-Last-Failure"
	// HeaderDeadSeq is the stream sequence (decimal) of the dead letter a
	// replay record is about, on captcha.replays.<id>.
	HeaderDeadSeq = "Captchaq-Dead-Seq"
	// HeaderClient is the producer's name (stream.ClientConfig.Name), on task
	// messages whose producer has one, and on their dead letters.
	HeaderClient = "Captchaq-Client"
	// HeaderReplayedBy is the stream sequence (decimal) of the dead letter a
	// task message replays, on replayed task messages.
	HeaderReplayedBy = "Captchaq-Replay-Of"
	// HeaderCancelHash is the hex SHA-256 of the secret that cancels a
	// task, on task messages whose producer may cancel them (stream's
	// Client.Solve sets it), on their dead letters, and on the replays of
	// those, so that the owner may cancel a replayed task too.
	HeaderCancelHash = "Captchaq-Cancel-Hash"
	// HeaderAttemptSeq is the stream sequence (decimal) of the attempt
	// event whose solve a token is, on tokens (captcha.tokens.<id>.<gen>):
	// a worker takes a stored token for a solve of this pool only when it
	// names an attempt of the generation (the attempt events are the
	// workers' own records, each written by compare-and-set).
	HeaderAttemptSeq = "Captchaq-Attempt-Seq"
	// HeaderTokenSeq is the sequence (decimal) in the token stream of the
	// token a solved outcome's solve stored, on outcomes that have one: a
	// reader takes that message for the token, and no later one on the
	// token's subject.
	HeaderTokenSeq = "Captchaq-Token-Seq"
	// HeaderSubmitBy is the instant (RFC 3339, on the broker's clock) by
	// which the producer needed its task message stored, on task messages
	// of a producer that answers its own caller within a bound (stream's
	// Client.Submit sets it from its context's deadline). A worker ends a
	// task message the stream stored after it dead (code SubmitByPassed)
	// without an attempt: its producer had given up on it, and told its
	// caller so, when it arrived (a broker that stalled while the message
	// waited in the connection's buffers).
	HeaderSubmitBy = "Captchaq-Submit-By"
	// HeaderMsgID is JetStream's message id: on a task message, the task's
	// id (or, on a replay, ReplayMsgID).
	HeaderMsgID = "Nats-Msg-Id"
	// HeaderNatsTTL is JetStream's per-message TTL.
	HeaderNatsTTL = "Nats-TTL"
)

// header is the first value of header key in h, the key matched exactly
// (as nats.Header.Get matches it: message headers are case-sensitive), or
// "" when h has none. The contract takes headers as a plain map, which a
// nats.Header is, so that it links no NATS client.
func header(h map[string][]string, key string) string {
	if v := h[key]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// The size limit of task messages: every message the CAPTCHA stream
// accepts fits its own dead letter.

package wire

// DeadLetterRoom is the part of the server's max_payload that a task
// message leaves for the headers a worker adds to its dead letter (id,
// generation, attempts, error code, reason, detail, subject, times: under
// 2 KB; the rest is margin). The stream's MaxMsgSize is max_payload less
// this, so a task the stream took is never too large for its dead letter.
const DeadLetterRoom = 8 << 10

// MaxTaskMessage is the largest task message, headers and body together,
// that the CAPTCHA stream takes on a server whose max_payload is
// maxPayload: maxPayload less DeadLetterRoom (half of it on a server with a
// max_payload under 16 KB). It is the stream's MaxMsgSize; a larger
// message is refused on publish with JetStream error 10054 ("message size
// exceeds maximum allowed"). -1 (no limit) when maxPayload is not known.
func MaxTaskMessage(maxPayload int64) int64 {
	if maxPayload <= 0 {
		return -1
	}
	return max(maxPayload-DeadLetterRoom, maxPayload/2)
}

// WholeDeadLetterMax is the largest task message, headers and body
// together, that is dead-lettered whole on a server whose max_payload is
// maxPayload: MaxTaskMessage less DeadLetterRoom, as the stream's limit
// holds its dead letters too. The stream takes a larger one, up to
// MaxTaskMessage, and dead-letters it (it is invalid anyway: no valid task
// comes near these sizes) without its body. stream's Client.Submit refuses a task
// over it.
func WholeDeadLetterMax(maxPayload int64) int64 {
	m := MaxTaskMessage(maxPayload)
	if m <= 0 {
		return m
	}
	return max(m-DeadLetterRoom, m/2)
}

// MaxDeadLetterDetail bounds the words a dead letter's Detail header may
// take, so the headers a worker adds stay within DeadLetterRoom.
const MaxDeadLetterDetail = 1024

// TokenMaxMsgSize is the largest token (the outcome with its solution
// and headers) the token stream keeps: 64 KiB, tens of times a
// reCAPTCHA token, a cf_clearance cookie with its user agent, or an
// image's text answer.
const TokenMaxMsgSize = 64 << 10

package solver

import (
	"log/slog"
	"net/http"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// DefaultBaseURL is the root of CaptchaAI's API, Config.BaseURL's default.
const DefaultBaseURL = "https://ocr.captchaai.com"

// Defaults of Config's zero fields.
const (
	// DefaultMinSubmitInterval is the default Config.MinSubmitInterval.
	DefaultMinSubmitInterval = 100 * time.Millisecond
	// DefaultSubmitWindow is the default Config.SubmitWindow: the window of
	// the service's ban threshold (classic.SubmitWindow).
	DefaultSubmitWindow = classic.SubmitWindow
	// DefaultSubmitBurst is the default Config.SubmitBurst, 55. It leaves a
	// margin of 5 for network jitter under the service's ban threshold of
	// classic.SubmitLimit in.php calls per SubmitWindow (MAX_USER_TURN, then
	// every in.php refused for classic.BanTime). After an outage the queued
	// submissions resume through the same limit: no burst.
	DefaultSubmitBurst = classic.SubmitLimit - 5
	// DefaultHTTPTimeout bounds one HTTP exchange of the default client.
	DefaultHTTPTimeout = 30 * time.Second
)

// Config configures a Client. Every zero field takes the default written
// beside it; only APIKey is required.
type Config struct {
	// BaseURL is the service's root, without /in.php. Default DefaultBaseURL.
	BaseURL string
	// APIKey is the account's key. Required. It is sent only in POST bodies
	// and never appears in errors, logs or URLs.
	APIKey string
	// HTTPClient sends the requests. Default: a client of the Client's own
	// with DefaultHTTPTimeout and connection reuse that follows no redirect
	// (the API never redirects; following one would re-send the key). A
	// given client is used as is, never modified: give it a CheckRedirect
	// that returns http.ErrUseLastResponse to get the same.
	HTTPClient *http.Client
	// Logger receives debug lines about submissions and polls (captcha id,
	// method, page host; never the key, a token or a full URL). Default: no
	// logging.
	Logger *slog.Logger
	// Timing says when to poll and when to give up. The zero value is the
	// production timing, with adaptive polling.
	Timing Timing
	// MinSubmitInterval is the least time between two in.php calls of this
	// key, shared by every Client of the same BaseURL and key in the process:
	// they all wait in one queue, spaced by the longest MinSubmitInterval any
	// of them was given. Zero means 100 ms; negative means this Client asks
	// for no spacing, which does not shorten another Client's.
	MinSubmitInterval time.Duration
	// SubmitBurst caps the in.php calls of this key in any window of
	// SubmitWindow (the service bans for 10 s over 60 in 3 s). Like
	// MinSubmitInterval the cap is shared: every (SubmitBurst, SubmitWindow)
	// of the Clients of one BaseURL and key holds for all their calls
	// together. Zero means DefaultSubmitBurst; negative means this Client
	// adds no cap, which does not lift another Client's.
	SubmitBurst int
	// SubmitWindow is the sliding window SubmitBurst counts calls in. Zero
	// means DefaultSubmitWindow.
	SubmitWindow time.Duration
	// Service is the profile of the service at BaseURL: what its codes mean
	// and which methods it has. Default ServiceOf(BaseURL).
	Service Service
	// OutageWarnAfter is how often the Logger says again, at WARN, that
	// the service is still unreachable (Unreachable); the first failed
	// call of an outage is logged at WARN at once, with the service's host
	// and the captchas held there. Zero means DefaultOutageWarnAfter (1 min).
	OutageWarnAfter time.Duration
	// StallAfter is how long a call may wait for a reply, while no other
	// call gets one, before the service counts as frozen (it accepts
	// connections and answers nothing): an outage, during which no captcha
	// is submitted. Zero means DefaultStallAfter (10 s).
	StallAfter time.Duration
	// OutageProbeMax is the longest wait between two probes of the
	// service during an outage (getbalance; the first a second after the
	// outage began, or OutageProbeMax if that is shorter, then at
	// doubling gaps). Zero means DefaultOutageProbeMax (15 s), the pace
	// that keeps a pool of n workers at n calls per 15 s to a service
	// that is down. A shorter one ends an outage sooner against a flaky
	// service (one answering a 5xx or a page to half its calls can fail
	// probe after probe), at more calls to it; package streamtest's
	// in-process emulator uses 100 ms.
	OutageProbeMax time.Duration
	// PollErrors is ignored: a captcha the service accepted is kept through
	// any number of failed polls (HTTP 5xx, garbage, network, refused
	// connections) and polled again until the service answers about it,
	// says it does not know it, or the caller's ctx ends (wait.go). The
	// field stays so that existing configurations still compile.
	PollErrors int
	// OnCall, when set, is told of every request to the service as it
	// ends, from the reply this Client parsed (no second read of it). It
	// must be quick and safe for concurrent use.
	OnCall func(Call)
	// Now is the clock: every time the Client reads (poll times, observed
	// ready times, call durations, submission spacing, outage spans) comes
	// from it, and every wait is the difference of two of its readings.
	// Give it the worker's clock (stream.WorkerConfig.Now). Default
	// time.Now.
	Now func() time.Time
	// LearnPlan, for a plan whose size is not told (no plan-wide quota),
	// keeps this Client's captchas on the service's threads (submitted,
	// neither answered nor probably solved) within a window learned from
	// in.php's capacity refusals (window.go): Solve waits for room in it.
	// Off: Solve submits at once and the caller limits the concurrency.
	LearnPlan bool
	// PlanFromService, with LearnPlan on CaptchaAI, reads the account's
	// threads (res.php?action=threadsinfo) before the first captcha and
	// every ThreadsInfoEvery, and holds the plan window at this Client's
	// share of them instead of learning it from refusals; a service that
	// tells nothing leaves the window learning. A pool shares the reading
	// (PlanToldAt), and a server that follows it (stream's
	// Admin.FollowServicePlan, run by `captchaq server`) makes it the
	// plan-wide quota, which then bounds the Client instead (PoolQuota):
	// measured in a cold burst (BENCHMARKS.md, "the plan told by the
	// service as a plan-wide quota"), as much of the plan as a plan told
	// by the operator, where a share fixed per worker used 4-6 points
	// less. `captchaq worker` sets it unless --plan-from-service=false.
	PlanFromService bool
	// Pingback has the service call back when an answer is ready
	// (pingback.go) instead of being polled; CaptchaAI and 2captcha both
	// do. Default: none.
	Pingback *Pingback
}

// What an emulator is told to be: its keys, solve times, faults and
// limits, and what it counts.

package fakeapi

import (
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// Range is a distribution of solve times. With Median zero it is uniform on
// [Min, Max]; otherwise log-normal with that median and its 99th percentile at
// Max, redrawn when outside [Min, Max] — the long right tail real solves have.
type Range struct {
	// Min is the shortest solve time drawn.
	Min time.Duration
	// Median is the median of the log-normal distribution; zero makes the
	// distribution uniform.
	Median time.Duration
	// Max is the longest solve time drawn; with a Median, also the 99th
	// percentile.
	Max time.Duration
}

// DefaultSolveTimes are the solve-time distributions of kinds that
// Config.SolveTime does not name, shaped after CaptchaAI's published speeds.
func DefaultSolveTimes() map[string]Range {
	return map[string]Range{
		KindRecaptcha:   {Min: 8 * time.Second, Median: 18 * time.Second, Max: 60 * time.Second},
		KindRecaptchaV3: {Min: 3 * time.Second, Median: 7 * time.Second, Max: 25 * time.Second},
		KindTurnstile:   {Min: 2 * time.Second, Median: 6 * time.Second, Max: 25 * time.Second},
		KindGeeTest:     {Min: 5 * time.Second, Median: 12 * time.Second, Max: 45 * time.Second},
		KindImage:       {Min: 1 * time.Second, Median: 3 * time.Second, Max: 12 * time.Second},
		KindGrid:        {Min: 5 * time.Second, Median: 12 * time.Second, Max: 40 * time.Second},
		// Not published; the example pack's first polls (15 s, 20 s for
		// Cloudflare) suggest these.
		KindGeeTestV4:  {Min: 5 * time.Second, Median: 12 * time.Second, Max: 45 * time.Second},
		KindHCaptcha:   {Min: 5 * time.Second, Median: 14 * time.Second, Max: 50 * time.Second},
		KindCloudflare: {Min: 8 * time.Second, Median: 18 * time.Second, Max: 60 * time.Second},
		KindBLS:        {Min: 3 * time.Second, Median: 8 * time.Second, Max: 30 * time.Second},
		// A proof-of-work puzzle: as Turnstile.
		KindFriendly: {Min: 2 * time.Second, Median: 6 * time.Second, Max: 25 * time.Second},
	}
}

// Config configures a Server. The zero value is a healthy service with
// unlimited threads, the default solve times and TestKey as its only key.
type Config struct {
	// Keys are the valid API keys. Empty means []string{TestKey}.
	Keys []string
	// Threads is the plan's thread cap: captchas being solved at once. Over
	// it, in.php answers ERROR_ZERO_BALANCE (CaptchaAI's "no free threads"),
	// or ERROR_NO_SLOT_AVAILABLE when NoSlotCode is set or the Service is
	// 2captcha (where ERROR_ZERO_BALANCE means no money); createTask
	// answers ERROR_NO_SLOT_AVAILABLE. Zero means unlimited.
	Threads int
	// NoSlotCode makes a full plan answer ERROR_NO_SLOT_AVAILABLE.
	NoSlotCode bool
	// ThreadsInfoCode, when set, is what res.php?action=threadsinfo answers
	// instead of the plan's threads: a code (ERROR_…) or any other text,
	// for a service that tells nothing. The 2captcha Service has no such
	// action whatever this says.
	ThreadsInfoCode string
	// SolveTime is the solve-time distribution by kind (Kind*). Missing kinds
	// use DefaultSolveTimes.
	SolveTime map[string]Range
	// TimeScale, when positive, multiplies every solve time (given or
	// default): 0.01 makes an 18-s reCAPTCHA take 180 ms. Zero means 1.
	TimeScale float64
	// Seed seeds the random source of solve times, faults, ids and tokens.
	// The same seed and the same sequence of requests give the same replies.
	Seed int64
	// Faults are the faults injected from the start; see SetFaults.
	Faults Faults
	// BurstLimit in.php calls of one key within BurstWindow are allowed; one
	// more answers MAX_USER_TURN and bans the key's in.php for BanTime.
	// Zero means the service's rule, 60 (classic.SubmitLimit).
	BurstLimit int
	// BurstWindow is the sliding window BurstLimit counts in. Zero means 3 s
	// (classic.SubmitWindow).
	BurstWindow time.Duration
	// BanTime is how long a key that broke BurstLimit gets MAX_USER_TURN
	// from in.php. Zero means 10 s (classic.BanTime).
	BanTime time.Duration
	// NumericIDs sends captcha ids as JSON numbers (CaptchaAI does, at times).
	NumericIDs bool
	// GeeTestAsString sends GeeTest answers as a JSON-encoded string instead
	// of an object (CaptchaAI does, at times).
	GeeTestAsString bool
	// Balance is the account's money at the start. Every captcha in.php
	// accepts lowers it by its price (Price); getbalance answers what is
	// left. Zero means 100. The emulator never refuses a submission for
	// want of money (NoFunds does that), so the balance may go below zero:
	// what was spent stays visible.
	Balance float64
	// Price is what 1000 accepted captchas cost, by method; a method
	// missing here costs DefaultPricePer1000. Figures for the emulator
	// only, not the services' price lists: 2captcha charges per captcha,
	// by method and load, and CaptchaAI sells thread plans, not captchas,
	// so a per-captcha price stands in for both here, to make every
	// accepted captcha (and every one paid twice) show as money.
	Price map[string]float64
	// ResultTTL is how long a ready answer can be fetched. Zero means 10 min.
	ResultTTL time.Duration
	// BatchPolls makes res.php answer multi-id polls (action=get&ids=…), a
	// feature of some 2captcha-compatible services that CaptchaAI does not
	// document. Off, as on CaptchaAI, res.php ignores ids: such a call has
	// no id and answers ERROR_WRONG_CAPTCHA_ID.
	BatchPolls bool
	// Service is the service emulated: ServiceCaptchaAI (the default) or
	// Service2Captcha. It decides which methods exist (2captcha has no
	// cloudflare_challenge, no bls and no GeeTest v4 as geetest with
	// version=4) and what a full plan answers (see Threads).
	Service string
	// NoFunds makes in.php answer ERROR_ZERO_BALANCE to every submission,
	// as 2captcha does for an account without money. Only with
	// Service2Captcha: on CaptchaAI that code means a full plan. createTask
	// answers it whatever the Service: in the JSON dialect it means no
	// money (anti-captcha.com/apidoc/errors, id 10).
	NoFunds bool
}

// Faults are injected failures. Rates are probabilities per request, in
// [0, 1], drawn from the seeded source.
type Faults struct {
	// Outage answers every request with an HTTP 500 HTML page.
	Outage bool
	// HTTP500 is the rate of HTTP 500 replies with an HTML body.
	HTTP500 float64
	// HTML is the rate of HTTP 200 replies whose body is an HTML page.
	HTML float64
	// Garbage is the rate of HTTP 200 replies with a body that is no reply.
	Garbage float64
	// Slow is the rate of replies delayed by SlowDelay.
	Slow float64
	// SlowDelay is how long a slow reply is held back (not scaled by
	// TimeScale).
	SlowDelay time.Duration
	// Unsolvable is the rate of captchas that end in
	// ERROR_CAPTCHA_UNSOLVABLE instead of an answer.
	Unsolvable float64
	// ReuseID makes in.php answer a new submission with the id of the
	// last captcha it accepted, as a broken provider might: it charges
	// the new one, and polls of the id answer about the old one.
	ReuseID bool
	// Rules fail matching tasks with a fixed code.
	Rules []Rule
}

// Rule fails the tasks it matches with Code: at in.php, or — with OnPoll — at
// res.php once the captcha's solve time has passed.
//
//	Rule{Param: "pageurl", Contains: "bad.example", Code: "ERROR_PAGEURL"}
type Rule struct {
	// Param is the parameter looked at; empty means any parameter.
	Param string
	// Contains must be in the parameter's value; empty matches every task
	// that has the parameter (every task, when Param is empty too).
	Contains string
	// Code is the API code answered.
	Code string
	// OnPoll answers Code from res.php when the captcha would be ready,
	// instead of from in.php.
	OnPoll bool
}

// Stats are the Server's counters.
type Stats struct {
	// InCalls and ResCalls count requests to in.php and res.php, faults
	// included: createTask counts as an in.php call, the JSON dialect's
	// other calls as res.php calls.
	InCalls, ResCalls int
	// BatchCalls counts the res.php calls that asked about several captchas
	// (action=get&ids=…), also counted in ResCalls; BatchAsked is the sum of
	// the ids they asked about.
	BatchCalls, BatchAsked int
	// Submitted counts captchas accepted by in.php.
	Submitted int
	// Spent is what the accepted captchas cost (Config.Price), less what
	// was refunded (Refunded), and Balance what is left of Config.Balance.
	Spent, Balance float64
	// PerTask counts the captchas paid per task, by TaskKey: accepted,
	// less those refunded. A key counted more than once is a task paid
	// more than once.
	PerTask map[string]int
	// Refunded counts the captchas whose price came back: those answered
	// ERROR_CAPTCHA_UNSOLVABLE, whose price 2captcha returns to the balance
	// (2captcha.com/api-docs/error-codes, error 12).
	Refunded int
	// Solved counts answers delivered: the first res.php call that returned a
	// captcha's answer.
	Solved int
	// Failed counts captchas that ended in an error code (unsolvable, OnPoll
	// rules) delivered by res.php.
	Failed int
	// Concurrent is how many captchas are being solved now (submitted, not
	// yet ready); MaxConcurrent is the most there ever were at once.
	Concurrent, MaxConcurrent int
	// ResCallsPerCaptcha counts res.php action=get&id calls per captcha id
	// (batch polls not included), for
	// the captchas the Server still remembers: an entry goes with its
	// captcha, once the captcha's answer is older than ResultTTL and more
	// than 1024 captchas are remembered, so that a long-running emulator
	// does not grow without bound.
	ResCallsPerCaptcha map[string]int
	// MaxResCallsPerCaptcha is the most res.php action=get calls any captcha
	// ever got, forgotten ones included.
	MaxResCallsPerCaptcha int
	// PickupLagMean and PickupLagMax are the time from a captcha becoming
	// ready to the res.php call that first returned it, over Pickups captchas.
	PickupLagMean, PickupLagMax time.Duration
	// Pickups counts the captchas whose final reply (answer or error code)
	// res.php has returned: the sample of PickupLagMean and PickupLagMax.
	Pickups int
	// Codes counts the error codes answered, injected ones included.
	Codes map[string]int
	// Pingbacks counts the callbacks sent (in.php's pingback, for either
	// Service), counted as they leave; PingbacksFailed those of them that
	// got no HTTP reply.
	Pingbacks, PingbacksFailed int
	// ReportsGood and ReportsBad count recorded reports.
	ReportsGood, ReportsBad int
}

// Faults returns the faults injected now.
func (s *Server) Faults() Faults {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.faults
}

// Stats returns a copy of the counters.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	st := s.stats
	st.Concurrent = len(s.solving)
	st.ResCallsPerCaptcha = make(map[string]int, len(s.stats.ResCallsPerCaptcha))
	for k, v := range s.stats.ResCallsPerCaptcha {
		st.ResCallsPerCaptcha[k] = v
	}
	st.PerTask = make(map[string]int, len(s.stats.PerTask))
	for k, v := range s.stats.PerTask {
		st.PerTask[k] = v
	}
	st.Balance = s.cfg.Balance - s.stats.Spent
	st.Codes = make(map[string]int, len(s.stats.Codes))
	for k, v := range s.stats.Codes {
		st.Codes[k] = v
	}
	if st.Pickups > 0 {
		st.PickupLagMean = s.lagSum / time.Duration(st.Pickups)
	}
	return st
}

// maxLags bounds the pickup lags a Server keeps for PickupLags.
const maxLags = 1 << 16

// PickupLags returns the pickup lags (ready → the res.php reply that first
// returned the captcha) of the pickups after the first n, in order: those
// since a Stats whose Pickups was n. Only the last 32768 to 65536 are kept.
func (s *Server) PickupLags(n int) []time.Duration {
	s.mu.Lock()
	defer s.mu.Unlock()
	i := max(n-s.lagsFrom, 0)
	if i >= len(s.lags) {
		return nil
	}
	return append([]time.Duration(nil), s.lags[i:]...)
}

// Repeated returns the tasks accepted more than once (PerTask), by key,
// with how many times each was.
func (st Stats) Repeated() map[string]int {
	out := map[string]int{}
	for k, n := range st.PerTask {
		if n > 1 {
			out[k] = n
		}
	}
	return out
}

// submitRule is the in.php rule cfg sets; a BurstLimit of 0 or less is
// unset.
func (cfg Config) submitRule() classic.Rule {
	return classic.Rule{Limit: max(cfg.BurstLimit, 0), Window: cfg.BurstWindow, Ban: cfg.BanTime}
}

// Hold keeps every captcha being solved, and every one accepted until
// release is called, from becoming ready: res.php (and getTaskResult)
// answers CAPCHA_NOT_READY and each counts in Stats.Concurrent, holding
// a thread of the plan (Config.Threads), as on a service whose solvers
// are slow. So a test finds the most captchas its clients keep at the
// service at once by waiting for Stats.Concurrent, not by timing.
// release makes each captcha ready at the time drawn when it was
// accepted, or at once if that has passed; it may be called more than
// once. Holds nest: captchas become ready when every Hold is released.
// Pingbacks (pingback, callbackUrl) are not held: they come at the
// drawn time.
func (s *Server) Hold() (release func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sweep()
	s.holds++
	if s.holds == 1 {
		for _, c := range s.solving {
			s.holdLocked(c)
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.holds--
			if s.holds > 0 {
				return
			}
			now := s.now()
			for _, c := range s.held {
				c.readyAt = c.due
				if c.readyAt.Before(now) {
					c.readyAt = now
				}
			}
			s.held = nil
		})
	}
}

// heldUntil is a held captcha's readyAt: never, until the release.
var heldUntil = time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)

// holdLocked keeps c from becoming ready until the holds are released.
// Callers hold s.mu.
func (s *Server) holdLocked(c *captcha) {
	c.due, c.readyAt = c.readyAt, heldUntil
	s.held = append(s.held, c)
}

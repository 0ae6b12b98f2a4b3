package main

import (
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// apiKey reads the solving service's key: from CAPTCHAAI_API_KEY, or from
// the file named by --key-file. Never from a flag value, which ps shows.
func apiKey(keyFile string) (string, error) {
	if keyFile != "" {
		b, err := os.ReadFile(keyFile)
		if err != nil {
			return "", fmt.Errorf("--key-file: %w", err)
		}
		k := strings.TrimSpace(string(b))
		if k == "" {
			return "", fmt.Errorf("--key-file %s: empty", keyFile)
		}
		return k, nil
	}
	return strings.TrimSpace(os.Getenv("CAPTCHAAI_API_KEY")), nil
}

// refuseTestKey refuses the emulator's test key for the service's own URL:
// the key of the README's trial, left in CAPTCHAAI_API_KEY once
// CAPTCHAQ_SOLVER_URL is unset, would be sent there, which refuses it.
func refuseTestKey(key, url string) error {
	if key != fakeapi.TestKey || url != solver.DefaultBaseURL {
		return nil
	}
	return usageError("CAPTCHAAI_API_KEY is the emulator's test key, which %s refuses: unset it (run then solves with its built-in emulator), "+
		"set your own key, or point --solver-url (CAPTCHAQ_SOLVER_URL) at the emulator", urlHost(url))
}

// solverFlags choose the solving service and its key.
type solverFlags struct {
	url, keyFile string
	pollScale    float64
	pollPace     float64
	submitEvery  time.Duration
	submitBurst  int
	batch        bool
	service      string
	outageWarn   time.Duration
	log          *slog.Logger // the solver client's debug lines (hosts and codes only)
	onCall       func(solver.Call)
	now          func() time.Time // the clock the worker reads too
	learnPlan    bool             // learn the plan window (solver.Config.LearnPlan)
	// planFromService reads the plan window from the service
	// (solver.Config.PlanFromService).
	planFromService bool
	pingback        *solver.Pingback // the service calls back
}

// register adds every solver flag: the service's and the solving ones.
func (s *solverFlags) register(fs *flag.FlagSet) {
	s.registerService(fs)
	s.registerSolving(fs)
}

// registerService adds the flags that choose the service and its key: all
// that balance and report need.
func (s *solverFlags) registerService(fs *flag.FlagSet) {
	s.pollScale, s.submitEvery, s.submitBurst, s.batch = 1, 100*time.Millisecond, 55, true
	fs.StringVar(&s.url, "solver-url", solver.DefaultBaseURL, "base URL of the 2captcha-compatible service (in.php, res.php)")
	fs.StringVar(&s.keyFile, "key-file", "", "file holding the API key (default: env CAPTCHAAI_API_KEY)")
}

// registerSolving adds the flags that pace submitting and polling.
func (s *solverFlags) registerSolving(fs *flag.FlagSet) {
	fs.DurationVar(&s.submitEvery, "submit-interval", 100*time.Millisecond,
		"least time between two in.php calls of this process; the service bans a key for 10 s over 60 calls in 3 s, so with N worker processes on one key give each N times 100ms")
	fs.IntVar(&s.submitBurst, "submit-burst", 55, "at most this many in.php calls of this process in any 3 s; with N processes on one key keep the sum under 60")
	fs.BoolVar(&s.batch, "poll-batch", false,
		"ask res.php about all captchas in flight in one call (action=get&ids), which CaptchaAI does not document: fewer calls and answers found sooner where a service has it; one without it is detected and polled one by one")
	fs.StringVar(&s.service, "service", "",
		"the service's profile, captchaai or 2captcha: what ERROR_ZERO_BALANCE means (CaptchaAI: all plan threads busy, wait; 2captcha: no money, stop) and which methods exist (default: from the --solver-url host)")
	fs.DurationVar(&s.outageWarn, "outage-warn-after", solver.DefaultOutageWarnAfter,
		"when the service does not answer (connection refused, DNS, TLS, no reply for 10 s, a run of HTTP 5xx), the first failed call is logged at WARN, no captcha is submitted and tasks wait without spending attempts; while it lasts the log says so again at WARN this often")
	fs.Var((*paceFlag)(&s.pollPace), "poll-pace",
		"how many times the service's recommended res.php pace (a poll every 5 s per captcha in flight) this worker's polls may come to when it asks captchas early whether a plan thread is free; the planned polls are never held back (default 0: the service's, 3 on CaptchaAI, 1 on 2captcha, whose limits ask for 5 s between polls)")
	fs.Float64Var(&s.pollScale, "poll-scale", 1, "multiply every polling delay by this (only with a sped-up emulator: fakeapi --speed 10 goes with 0.1)")
}

func (s *solverFlags) client(timing solver.Timing) (*solver.Client, error) {
	return s.clientWith(timing, nil)
}

// clientWith builds the solving service's client; hc (nil: the solver's own
// default) sends its HTTP requests.
func (s *solverFlags) clientWith(timing solver.Timing, hc *http.Client) (*solver.Client, error) {
	if err := s.checkURL(); err != nil {
		return nil, err
	}
	key, err := apiKey(s.keyFile)
	if err != nil {
		return nil, err
	}
	if key == "" {
		return nil, fmt.Errorf("no API key: set CAPTCHAAI_API_KEY or --key-file")
	}
	if timing.Scale == 0 && s.pollScale > 0 && s.pollScale != 1 {
		timing.Scale = s.pollScale
	}
	return s.clientWithKey(key, timing, hc)
}

// clientWithKey builds the solving service's client with the given key;
// every solver flag applies, whichever command registered them.
func (s *solverFlags) clientWithKey(key string, timing solver.Timing, hc *http.Client) (*solver.Client, error) {
	cfg, err := s.config(key, timing, hc)
	if err != nil {
		return nil, err
	}
	return solver.NewClient(cfg)
}

// config is the solving client's configuration with the given key: every
// solver flag applies.
func (s *solverFlags) config(key string, timing solver.Timing, hc *http.Client) (solver.Config, error) {
	if err := s.checkURL(); err != nil {
		return solver.Config{}, err
	}
	if err := refuseTestKey(key, s.url); err != nil {
		return solver.Config{}, err
	}
	cfg, err := s.baseConfig(timing, hc)
	cfg.APIKey = key
	return cfg, err
}

// baseConfig is what every provider's client shares of the solver flags:
// config without the URL and the key, which each provider's entry gives
// (run --fake-providers has no --solver-url at all, and was refused for it).
func (s *solverFlags) baseConfig(timing solver.Timing, hc *http.Client) (solver.Config, error) {
	timing.NoBatch = !s.batch
	timing.PollPace = s.pollPace
	if timing.Scale == 0 && s.pollScale > 0 && s.pollScale != 1 {
		timing.Scale = s.pollScale
	}
	svc, err := s.profile()
	if err != nil {
		return solver.Config{}, err
	}
	return solver.Config{BaseURL: s.url, Timing: timing, HTTPClient: hc, Logger: s.log,
		MinSubmitInterval: s.submitEvery, SubmitBurst: s.submitBurst, Service: svc, OutageWarnAfter: s.outageWarn, OnCall: s.onCall, Now: s.now, LearnPlan: s.learnPlan, PlanFromService: s.planFromService, Pingback: s.pingback}, nil
}

// profile is the --service profile, or the one of the --solver-url host.
func (s *solverFlags) profile() (solver.Service, error) {
	if s.service == "" {
		return solver.ServiceOf(s.url), nil
	}
	svc, err := solver.ParseService(s.service)
	if err != nil {
		return "", usageError("--service: %v", err)
	}
	return svc, nil
}

// policyFlags tune the retry policy.
type policyFlags struct {
	maxAttempts int
	initial     time.Duration
	maxInterval time.Duration
}

func (p *policyFlags) register(fs *flag.FlagSet) {
	fs.IntVar(&p.maxAttempts, "max-attempts", retry.DefaultMaxAttempts, "attempts per task before it goes to the dead letter")
	fs.DurationVar(&p.initial, "retry-initial", retry.DefaultInitialInterval, "delay after the first failed attempt (doubles per attempt, with jitter)")
	fs.DurationVar(&p.maxInterval, "retry-max", retry.DefaultMaxInterval, "longest delay between attempts")
}

func (p *policyFlags) policy() retry.Policy {
	return retry.Policy{MaxAttempts: p.maxAttempts, InitialInterval: p.initial, MaxInterval: p.maxInterval}
}

// paceFlag is --poll-pace: 0 or a finite positive multiple.
type paceFlag float64

func (p *paceFlag) String() string { return strconv.FormatFloat(float64(*p), 'g', -1, 64) }

func (p *paceFlag) Set(s string) error {
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		v = math.NaN() // not a number: refused as one
	}
	if err := solver.CheckPollPace(v); err != nil {
		return err
	}
	*p = paceFlag(v)
	return nil
}

// checkURL refuses a --solver-url that names no host (what
// "http://$(cat fakeapi.addr)" leaves when the emulator did not start) or
// is not http(s), as a usage error that says what to put there; the
// solving client would refuse it too, but without naming the flag.
func (s *solverFlags) checkURL() error {
	u, err := url.Parse(s.url)
	if err == nil && (u.Scheme == "http" || u.Scheme == "https") && u.Hostname() != "" {
		return nil
	}
	return usageError("--solver-url %q names no host: want the service's URL such as %s, or the emulator's, e.g. http://$(cat fakeapi.addr) once it listens (%s)",
		redactURLs(s.url), solver.DefaultBaseURL, envName("solver-url"))
}

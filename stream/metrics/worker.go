package metrics

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// Buckets of the solve and API-call duration histograms, in seconds. NewWorker
// reads them; callers must not modify them.
var (
	// SolveBuckets are the upper bounds of captchaq_solve_duration_seconds:
	// solves take 2–180 s.
	SolveBuckets = []float64{1, 2, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180, 300}
	// APICallBuckets are the upper bounds of
	// captchaq_api_call_duration_seconds: single API calls take well under a
	// second to a few seconds.
	APICallBuckets = []float64{0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30}
)

// Worker is the metrics of one worker process, all named captchaq_*. It
// implements stream.Observer; wrap the solver with Solver and its HTTP
// transport with Transport to count captchas at the service and API calls.
type Worker struct {
	reg *Registry

	tasks     *Counter
	attempts  *Counter
	retries   *Counter
	snoozes   *Counter
	handbacks *Counter
	dead      *Counter
	forged    *Counter
	solveTime *Histogram
	apiCalls  *Counter
	apiTime   *Histogram
	inFlight  *Gauge
	threads   *Gauge
	solves    *Counter
	spend     *Counter

	producersMu sync.Mutex
	producers   map[string]bool // the producer labels given so far
}

// maxProducers is how many producers' names a worker's provider counters
// take as labels; the solves of any producer past them count as "other",
// so that clients naming themselves freely cannot grow the series without
// bound. A pool's producers are its applications and the gateway's keys:
// a few, rarely more than a handful.
const maxProducers = 64

// NewWorker registers a worker's metrics in a new registry; threads is the
// worker's --threads, exported as captchaq_threads.
func NewWorker(threads int) *Worker {
	r := NewRegistry().WithRuntime()
	m := &Worker{
		reg:       r,
		tasks:     r.Counter("captchaq_tasks_total", "Tasks that reached an outcome in this worker, by method and outcome (solved, dead).", "method", "outcome"),
		attempts:  r.Counter("captchaq_attempts_total", "Attempts started (each spends one of a task's attempts).", "method"),
		retries:   r.Counter("captchaq_retries_total", "Failed attempts that will be retried after a backoff, by the service's error code.", "method", "code"),
		snoozes:   r.Counter("captchaq_capacity_snoozes_total", "Attempts put off because the service had no free thread (no attempt spent), by code.", "method", "code"),
		handbacks: r.Counter("captchaq_handbacks_total", "Tasks handed back without spending an attempt (shutdown, fatal service errors).", "method"),
		dead:      r.Counter("captchaq_dead_letters_total", "Tasks moved to the dead letter, by reason.", "method", "reason"),
		forged:    r.Counter("captchaq_forged_messages_total", "Task messages that were not a submission of their id (INVALID_ENVELOPE) ended by this worker, recorded or not: a worker records a few of an id's and ends the rest with an ack and no record."),
		solveTime: r.Histogram("captchaq_solve_duration_seconds", "Time of the attempt that solved a task, submission to answer.", SolveBuckets, "method"),
		apiCalls:  r.Counter("captchaq_api_calls_total", "Calls to the solving service, by endpoint (in.php, res.php) and answer code (OK, CAPCHA_NOT_READY, ERROR_…, HTTP_<status>, NETWORK).", "endpoint", "code"),
		apiTime:   r.Histogram("captchaq_api_call_duration_seconds", "Duration of calls to the solving service, by endpoint.", APICallBuckets, "endpoint"),
		inFlight:  r.Gauge("captchaq_in_flight", "Captchas this worker has at the solving service now."),
		threads:   r.Gauge("captchaq_threads", "Tasks this worker solves at once at most (--threads)."),
		solves:    r.Counter("captchaq_provider_solves_total", "Answers from each provider (worker --providers), by method, producer (unnamed, other past 64 names) and cost basis (price, reported, plan).", "provider", "method", "producer", "basis"),
		spend:     r.Counter("captchaq_provider_spend_total", "What the answers from each provider cost (worker --providers), in the currency of the providers file's prices, by method and producer.", "provider", "method", "producer"),
	}
	m.threads.Set(float64(threads))
	m.inFlight.Set(0)
	return m
}

// Registry returns the registry the metrics live in, to add more or serve it.
func (m *Worker) Registry() *Registry { return m.reg }

// Observe counts one step of a task. It is quick and safe for concurrent use.
func (m *Worker) Observe(o stream.Observation) {
	method := methodLabel(o.Method)
	switch o.Kind {
	case stream.EventAttempt:
		m.attempts.Inc(method)
	case stream.EventRetry:
		m.retries.Inc(method, codeLabel(o.Code))
	case stream.EventSnooze:
		m.snoozes.Inc(method, codeLabel(o.Code))
	case stream.EventHandback:
		m.handbacks.Inc(method)
	case stream.EventSolved:
		m.tasks.Inc(method, "solved")
		m.solveTime.Observe(o.Duration.Seconds(), method)
	case stream.EventDead:
		m.tasks.Inc(method, "dead")
		m.dead.Inc(method, reasonLabel(o.Reason))
	case stream.ObservedForged:
		m.forged.Inc()
	}
}

// Solver wraps s so that captchaq_in_flight counts the solves under way,
// and captchaq_provider_solves_total and captchaq_provider_spend_total the
// answers that name their provider and cost (a provider.Set's).
func (m *Worker) Solver(s solver.Solver) solver.Solver {
	return solver.Func(func(ctx context.Context, req solver.Request) (solver.Answer, error) {
		m.inFlight.Add(1)
		defer m.inFlight.Add(-1)
		ans, err := s.Solve(ctx, req)
		if err == nil && ans.Provider != "" {
			producer := m.producerLabel(req.Producer)
			m.solves.Inc(ans.Provider, methodLabel(req.Method), producer, ans.CostBasis)
			m.spend.Add(ans.Cost, ans.Provider, methodLabel(req.Method), producer)
		}
		return ans, err
	})
}

// OnCall counts one call to the solving service: its endpoint (in.php,
// res.php), its answer code, and how long it took. Transport calls it; it
// has the shape of a per-call hook a solver client can call itself.
func (m *Worker) OnCall(endpoint, code string, d time.Duration) {
	endpoint = endpointLabel(endpoint)
	m.apiCalls.Inc(endpoint, codeLabel(code))
	m.apiTime.Observe(d.Seconds(), endpoint)
}

// Transport wraps base (nil: http.DefaultTransport) so that every call to
// the solving service is counted by OnCall. It reads at most the first 4 KB
// of each reply to find the answer code and hands the reply on unchanged.
func (m *Worker) Transport(base http.RoundTripper) http.RoundTripper {
	if base == nil {
		base = http.DefaultTransport
	}
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		start := time.Now()
		endpoint := path.Base(req.URL.Path)
		batch := endpoint == "res.php" && asksMany(req)
		resp, err := base.RoundTrip(req)
		if err != nil {
			m.OnCall(endpoint, "NETWORK", time.Since(start))
			return resp, err
		}
		code := "HTTP_" + strconv.Itoa(resp.StatusCode)
		if resp.StatusCode == http.StatusOK {
			peek, rerr := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body = struct {
				io.Reader
				io.Closer
			}{io.MultiReader(bytes.NewReader(peek), resp.Body), resp.Body}
			code = answerCode(peek)
			if batch && (code == "OK" || !codePattern.MatchString(code)) {
				code = "BATCH" // states of several captchas, read by the solver
			}
			if rerr != nil {
				code = "NETWORK"
			}
		}
		m.OnCall(endpoint, code, time.Since(start))
		return resp, nil
	})
}

// asksMany reports whether req is a batch poll (res.php with ids=…), from a
// copy of its form body.
func asksMany(req *http.Request) bool {
	if req.GetBody == nil {
		return req.URL.Query().Has("ids")
	}
	body, err := req.GetBody()
	if err != nil {
		return false
	}
	defer body.Close()
	b, err := io.ReadAll(io.LimitReader(body, 64<<10))
	if err != nil || !bytes.Contains(b, []byte("ids=")) {
		return false
	}
	v, err := url.ParseQuery(string(b))
	return err == nil && v.Has("ids")
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// answerCode reads the code of a 2captcha-style reply: OK for success, the
// request field of a failure (ERROR_…, CAPCHA_NOT_READY), BAD_REPLY for
// anything else (an HTML page, say).
func answerCode(body []byte) string {
	body = bytes.TrimSpace(body)
	if len(body) > 0 && body[0] == '{' {
		var r struct {
			Status  json.Number     `json:"status"`
			Request json.RawMessage `json:"request"`
		}
		if json.Unmarshal(body, &r) != nil {
			return "BAD_REPLY"
		}
		if r.Status.String() == "1" {
			return "OK"
		}
		var s string
		if json.Unmarshal(r.Request, &s) == nil && s != "" {
			return s
		}
		return "BAD_REPLY"
	}
	s := string(body)
	if s == "OK" || strings.HasPrefix(s, "OK|") {
		return "OK"
	}
	if codePattern.MatchString(s) {
		return s
	}
	return "BAD_REPLY"
}

// Label values come from tasks and from the service, so they are bounded
// here: a producer's typo or a strange reply must not create new series
// without end.
var codePattern = regexp.MustCompile(`^[A-Z][A-Z0-9_]{1,47}(: ?[0-9]{1,5})?$`)

// methodLabel is a method of the catalogue itself, "unknown" for none and
// "other" for a method captchaq does not solve.
// producerLabel is p as a label: "unnamed" for none, "other" for a name
// past the first maxProducers.
func (m *Worker) producerLabel(p string) string {
	if p == "" {
		return "unnamed"
	}
	m.producersMu.Lock()
	defer m.producersMu.Unlock()
	if m.producers[p] {
		return p
	}
	if len(m.producers) >= maxProducers {
		return "other"
	}
	if m.producers == nil {
		m.producers = map[string]bool{}
	}
	m.producers[p] = true
	return p
}

func methodLabel(m string) string {
	if captcha.Known(m) {
		return m
	}
	if m == "" {
		return "unknown"
	}
	return "other"
}

func codeLabel(c string) string {
	switch {
	case c == "":
		return "none"
	case codePattern.MatchString(c):
		return c
	}
	return "OTHER"
}

func reasonLabel(r string) string {
	if r == "" || len(r) > 32 || strings.ContainsAny(r, " \"\\\n") {
		return "other"
	}
	return r
}

func endpointLabel(e string) string {
	switch e {
	case "in.php", "res.php":
		return e
	}
	return "other"
}

// Mux serves the registry on /metrics, liveness on /healthz (200 while the
// process serves HTTP) and readiness on /readyz (200 when ready returns nil,
// else 503 with its error).
func Mux(reg *Registry, ready func() error) *http.ServeMux {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", reg.Handler())
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = io.WriteString(w, "ok\n")
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if err := ready(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			_, _ = io.WriteString(w, "not ready: "+err.Error()+"\n")
			return
		}
		_, _ = io.WriteString(w, "ready\n")
	})
	return mux
}

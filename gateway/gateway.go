package gateway

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"mime"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/stream"
)

// Config configures a Gateway.
type Config struct {
	// Conn is the gateway's NATS connection: producer credentials are all
	// it needs. Required.
	Conn *nats.Conn
	// Topology must match the workers' (stream.ClientConfig.Topology).
	Topology stream.Topology
	// Keys are the callers. At least one.
	Keys []Key
	// Limits are the per-key rate limits; the zero value mirrors the
	// service's.
	Limits Limits
	// PlanThreads is the plan's thread count that keys' shares divide.
	// 0: read from the stream's plan (stream.PlanThreads) at start; when
	// no plan is set either, shares are not enforced (SharesUnenforced).
	PlanThreads int
	// Pingback configures the callbacks to callers' pingback URLs.
	Pingback Pingback
	// Admission bounds what a request costs before its key is known.
	Admission Admission
	// Logger receives the gateway's log; default slog.Default(). It never
	// gets a key, a token or a page URL beyond its host.
	Logger *slog.Logger
	// Now is the clock of rate limits, deadlines and token expiry; default
	// time.Now. Give the producers' and workers' clock.
	Now func() time.Time
}

// Gateway serves in.php and res.php (ServeHTTP) for its keys. Build it with
// New and Close it when done. It is safe for concurrent use.
type Gateway struct {
	cfg     Config
	log     *slog.Logger
	callers map[[32]byte]*caller
	reader  *stream.Client
	threads int
	// unenforced: some key has a share, and there is no plan to divide.
	unenforced bool
	// guard and pingClient keep callbacks to the addresses allowed.
	guard      *addrGuard
	pingClient *http.Client
	admit      *admission

	mu    sync.Mutex
	tasks map[string]*entry // by captchaq task id
	// past are the generations of the tasks the gateway forgot (sweep),
	// by captchaq task id, for as long as the stream keeps their
	// outcomes: a poll of one reads its own generation's outcome.
	past map[string]pastTask

	stop     context.CancelFunc
	ctx      context.Context
	bg       sync.WaitGroup
	pingwait sync.WaitGroup
}

// caller is a key at run time: its producer client, its limits, and how
// many of its tasks are unfinished (under Gateway.mu).
type caller struct {
	Key
	client   *stream.Client
	submits  *classic.Window
	polls    *classic.Window
	inFlight int
}

// entry is a task the gateway submitted, while it remembers it.
type entry struct {
	caller   *caller
	num      string // the id the caller knows
	gen      uint64 // the generation its submission got; 0 until Submit returns
	method   string
	pingback string
	// sent is when it was submitted (real time: where a restarted
	// follower starts); deadline is when the task stops being useful.
	sent, deadline time.Time
	done           bool
	doneAt         time.Time
	out            stream.Outcome
	// early are outcomes stored under the id before Submit returned its
	// generation (at most maxEarly; overflow says more came): the one of
	// that generation, if among them, is the task's.
	early    []genOutcome
	overflow bool
}

// genOutcome is an outcome and the generation it ends.
type genOutcome struct {
	out stream.Outcome
	gen uint64
}

// maxEarly bounds the outcomes an entry keeps while its generation is not
// known yet: a submission's own outcome cannot come before it is stored,
// so more than a few are someone else's.
const maxEarly = 4

// pastTask is a forgotten task's generation, and when it was forgotten.
type pastTask struct {
	gen uint64
	at  time.Time
}

// keepDone is how long a finished task's outcome stays in memory; after
// that, polls read it from the stream. Its token is dropped from memory
// at its expiry in any case.
const keepDone = 10 * time.Minute

// New binds the gateway's producers (one stream.Client per key, named
// after its producer) and starts following the stream's outcomes.
func New(ctx context.Context, cfg Config) (*Gateway, error) {
	if cfg.Conn == nil {
		return nil, errors.New("gateway: Config.Conn: required")
	}
	if len(cfg.Keys) == 0 {
		return nil, errors.New("gateway: Config.Keys: no keys")
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.PlanThreads < 0 {
		return nil, fmt.Errorf("gateway: Config.PlanThreads %d: negative", cfg.PlanThreads)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	cfg.Pingback = cfg.Pingback.withDefaults()
	g := &Gateway{cfg: cfg, log: cfg.Logger, callers: map[[32]byte]*caller{}, tasks: map[string]*entry{}, past: map[string]pastTask{}}
	guard, err := newAddrGuard(cfg.Pingback)
	if err != nil {
		return nil, fmt.Errorf("gateway: Config.%w", err)
	}
	g.guard, g.pingClient = guard, guard.client()
	g.admit = newAdmission(cfg.Admission.withDefaults())
	producers := map[string]bool{}
	for i, k := range cfg.Keys {
		if err := k.Validate(); err != nil {
			return nil, fmt.Errorf("gateway: Config.Keys[%d]: %w", i, err)
		}
		// The stream refuses a task whose deadline is further away than
		// it keeps tasks: such a key's every in.php would be refused.
		if keep := cmp.Or(cfg.Topology.Retention, stream.DefaultRetention); time.Duration(k.Deadline) > keep {
			return nil, fmt.Errorf("gateway: Config.Keys[%d] (producer %s): deadline %s: further away than the stream's retention %s",
				i, k.Producer, time.Duration(k.Deadline), keep)
		}
		h := sha256.Sum256([]byte(k.Key))
		if g.callers[h] != nil || producers[k.Producer] {
			return nil, fmt.Errorf("gateway: Config.Keys[%d] (producer %s): key or producer named twice", i, k.Producer)
		}
		producers[k.Producer] = true
		c, err := stream.NewClient(ctx, cfg.Conn, stream.ClientConfig{Topology: cfg.Topology, Name: k.Producer,
			DefaultDeadline: time.Duration(k.Deadline), Now: cfg.Now})
		if err != nil {
			return nil, fmt.Errorf("gateway: producer %s: %w", k.Producer, err)
		}
		g.callers[h] = &caller{Key: k, client: c,
			submits: classic.NewRuleWindow(cfg.Limits.submitRule()),
			polls:   classic.NewWindow(cfg.Limits.Polls, cfg.Limits.PollWindow, 0)}
		if g.reader == nil {
			g.reader = c
		}
	}
	g.threads = cfg.PlanThreads
	if g.threads == 0 {
		g.threads, _ = stream.PlanThreads(ctx, cfg.Conn, cfg.Topology)
	}
	for _, c := range g.callers {
		if c.Share > 0 && g.threads == 0 {
			g.unenforced = true
		}
	}
	g.ctx, g.stop = context.WithCancel(context.Background())
	g.bg.Add(2)
	go g.follow(time.Now().Add(-time.Second))
	go g.janitor()
	return g, nil
}

// Close stops following outcomes and sending pingbacks, and waits for
// both.
// SharesUnenforced reports that some key has a share of the plan but the
// gateway knows no plan thread count (Config.PlanThreads, or the stream's
// plan at New), so no share is enforced: the caller says so, naming its own
// setting.
func (g *Gateway) SharesUnenforced() bool { return g.unenforced }

func (g *Gateway) Close() {
	g.stop()
	g.bg.Wait()
	g.pingwait.Wait()
}

// follow keeps the outcomes of the gateway's tasks in memory as the stream
// stores them, and sends their pingbacks. One reader for every task: a
// poll of an unfinished task costs no broker call. On a read error it
// starts again a little before the time it stopped.
func (g *Gateway) follow(since time.Time) {
	defer g.bg.Done()
	for g.ctx.Err() == nil {
		err := g.reader.GenOutcomesSince(g.ctx, since, true, g.record)
		if g.ctx.Err() != nil {
			return
		}
		g.log.Warn("following outcomes stopped; starting again", slog.Any("error", err))
		select {
		case <-g.ctx.Done():
			return
		case <-time.After(time.Second):
		}
		since = g.oldestPending(time.Now().Add(-time.Second))
	}
}

// oldestPending is a little before the submission of the oldest task the
// gateway waits for, or def when it waits for none: a follower started
// there misses no outcome of them.
func (g *Gateway) oldestPending(def time.Time) time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, e := range g.tasks {
		if !e.done && e.sent.Before(def) {
			def = e.sent
		}
	}
	return def.Add(-time.Second)
}

// janitor sweeps every 30 s until Close.
func (g *Gateway) janitor() {
	defer g.bg.Done()
	tick := time.NewTicker(30 * time.Second)
	defer tick.Stop()
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-tick.C:
			g.sweep()
			g.admit.sweep(g.cfg.Now())
		}
	}
}

// record takes an outcome the stream stored under generation gen: the
// end of a task the gateway waits for when gen is the generation its
// submission got, else nothing of the gateway's. Anyone who may submit can
// have outcomes stored under a gateway task's id (a forged message, a task
// submitted again after the duplicate window); only the submission's own
// outcome answers the caller, calls its pingback and frees its slot.
func (g *Gateway) record(o stream.Outcome, gen uint64) {
	g.mu.Lock()
	e := g.tasks[o.ID]
	switch {
	case e == nil || e.done:
	case e.gen == 0:
		// Submit has not returned the generation yet: keep it until it
		// does (gotGen).
		if len(e.early) < maxEarly {
			e.early = append(e.early, genOutcome{o, gen})
		} else {
			e.overflow = true
		}
	case gen == e.gen:
		g.finishLocked(e, o)
	}
	g.mu.Unlock()
}

// finishLocked ends entry e with its outcome o: the answer of its polls,
// its slot freed, its pingback sent. Callers hold g.mu.
func (g *Gateway) finishLocked(e *entry, o stream.Outcome) {
	now := g.cfg.Now()
	e.done, e.doneAt, e.out, e.early = true, now, o, nil
	e.caller.inFlight--
	if e.pingback != "" {
		g.pingwait.Add(1)
		go g.sendPingback(e.num, e.pingback, g.answerOf(o, e.method, now))
	}
}

// gotGen records the generation Submit gave entry e (task id) and ends it
// with an outcome of that generation that came first. When more outcomes
// came under the id than the entry keeps, its own is read from the stream.
func (g *Gateway) gotGen(e *entry, id string, gen uint64, deadline time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	e.gen, e.deadline = gen, deadline
	for _, eo := range e.early {
		if eo.gen == gen {
			g.finishLocked(e, eo.out)
			return
		}
	}
	e.early = nil
	if !e.overflow || g.ctx.Err() != nil {
		return
	}
	g.bg.Add(1)
	go func() {
		defer g.bg.Done()
		ctx, cancel := context.WithDeadline(g.ctx, deadline.Add(time.Minute))
		defer cancel()
		o, err := e.caller.client.WaitReceipt(ctx, stream.Receipt{ID: id, Seq: gen})
		if err != nil && o.ID == "" {
			return // the sweep forgets it past its deadline; polls read the stream
		}
		g.record(o, gen)
	}()
}

// sweep forgets finished tasks after keepDone, drops tokens from memory at
// their expiry, and forgets unfinished tasks a minute past their deadline
// (no worker took them, or their outcome was lost): they stop counting
// against the key's share, and polls read them from the stream.
func (g *Gateway) sweep() {
	now := g.cfg.Now()
	g.mu.Lock()
	defer g.mu.Unlock()
	for id, e := range g.tasks {
		if !e.done {
			if !e.deadline.IsZero() && now.Sub(e.deadline) > time.Minute {
				delete(g.tasks, id)
				g.past[id] = pastTask{gen: e.gen, at: now}
				e.caller.inFlight--
			}
			continue
		}
		if now.Sub(e.doneAt) > keepDone {
			delete(g.tasks, id)
			g.past[id] = pastTask{gen: e.gen, at: now}
			continue
		}
		if e.out.Solution != nil && !now.Before(e.out.ExpiresAt) {
			e.out.Solution, e.out.UserAgent = nil, ""
		}
	}
	keep := cmp.Or(g.cfg.Topology.Retention, stream.DefaultRetention)
	for id, p := range g.past {
		if now.Sub(p.at) > keep || len(g.past) > maxPast {
			delete(g.past, id)
		}
	}
}

// maxPast bounds the forgotten tasks whose generations the gateway keeps
// (about 150 bytes each): over it, some are dropped, and answer like tasks
// submitted before a restart.
const maxPast = 1 << 20

// ServeHTTP serves /in.php and /res.php, GET and POST; anything else is
// 404.
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	op := r.URL.Path[strings.LastIndexByte(r.URL.Path, '/')+1:]
	if op != classic.SubmitPath && op != classic.ResultPath {
		http.NotFound(w, r)
		return
	}
	if r.Method == http.MethodOptions {
		// A browser's preflight of a JSON POST (the JavaScript SDK posts
		// images so): allowed from anywhere, as header_acao=1 allows
		// the request itself; the key still decides everything.
		w.Header().Set("Access-Control-Allow-Origin", "*")
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST")
		w.Header().Set("Access-Control-Allow-Headers", "Content-Type")
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if r.Method != http.MethodGet && r.Method != http.MethodPost {
		w.Header().Set("Allow", "GET, POST")
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return
	}
	// What a request may cost is bounded before its key is known: an
	// address's ban, the key in the query before the body is read; a
	// request whose key is not in the query counts against its address's
	// requests and waits for a turn to read its body. A known key's
	// requests are bounded by the key's own limits instead.
	now, addr := g.cfg.Now(), clientAddr(r)
	q := queryForm(r)
	if ct, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type")); ct == "application/json" && r.Method == http.MethodPost && q["json"] == "" {
		// A caller that posts JSON reads JSON (its json=1 is in the
		// body): so are the answers given before the body is read.
		q["json"] = "1"
	}
	if g.admit.banned(addr, now) {
		g.refuse(w, q, op, classic.CodeIPBanned)
		return
	}
	known := func(key string) bool {
		if key == "" || g.callers[sha256.Sum256([]byte(key))] == nil {
			g.admit.badKey(addr, now)
			return false
		}
		return true
	}
	switch {
	case q["key"] != "" && !known(q["key"]):
		unread(w)
		newReplier(w, q).code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	case q["key"] == "":
		enter, ok := g.admit.enter(addr)
		if !ok {
			g.refuse(w, q, op, "busy")
			return
		}
		// Once the key in the body is known, the key's limits bound the
		// request, as they bound one with its key in the query: it leaves
		// its address's count then.
		var once sync.Once
		leave := func() { once.Do(enter) }
		defer leave()
		inner := known
		known = func(key string) bool {
			ok := inner(key)
			if ok {
				leave()
			}
			return ok
		}
		if r.Method == http.MethodPost && r.ContentLength != 0 {
			done, ok := g.admit.unauthTurn(r.Context(), addr)
			if !ok {
				g.refuse(w, q, op, "busy")
				return
			}
			defer done()
			inner := known
			known = func(key string) bool {
				ok := inner(key)
				done()
				return ok
			}
		}
	}
	f, err := readForm(w, r, known)
	rep := newReplier(w, f)
	var tooBig *http.MaxBytesError
	switch {
	case errors.Is(err, errUnknownKey):
		unread(w)
		rep.code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	case errors.As(err, &tooBig) && op == classic.SubmitPath:
		// Only an image makes a body this large: the service's code
		// for an image over its size (solver/testdata/service/replies.json,
		// ERROR_TOO_BIG_CAPTCHA_FILESIZE).
		rep.code(classic.CodeTooBigCaptchaFilesize, fmt.Sprintf("the request is over %d bytes: an image is at most %d", tooBig.Limit, captcha.MaxImageSize))
		return
	case err != nil:
		rep.code(classic.CodeBadParameters, err.Error())
		return
	}
	c := g.callers[sha256.Sum256([]byte(f["key"]))]
	if c == nil || f["key"] == "" {
		g.admit.badKey(addr, now)
		// The service's answer to a key it does not know
		// (solver/testdata/service/replies.json, ERROR_KEY_DOES_NOT_EXIST).
		rep.code(classic.CodeKeyDoesNotExist, "no such gateway key")
		return
	}
	if op == classic.SubmitPath {
		g.submit(r.Context(), c, f, rep)
		return
	}
	g.result(r.Context(), c, f, rep)
}

// refuse answers a request the gateway does not read: from a banned
// address (IP_BANNED), or over its address's count or the turns to read
// bodies before their key is known (busy), with the service's code for
// too many requests of the operation (in.php MAX_USER_TURN, res.php
// "ERROR: 1005"), which callers wait on and retry.
func (g *Gateway) refuse(w http.ResponseWriter, q form, op, why string) {
	unread(w)
	rep := newReplier(w, q)
	switch {
	case why == classic.CodeIPBanned:
		rep.code(classic.CodeIPBanned, "too many requests with keys the gateway does not know from this address: wait")
	case op == classic.SubmitPath:
		rep.code(classic.CodeMaxUserTurn, "too many requests from this address at once: wait")
	default:
		rep.code(classic.CodeTooManyPolls, "too many requests from this address at once: wait")
	}
}

// unread ends a request whose body the gateway does not read: the
// connection closes with the answer, without waiting for the rest of the
// body (the server would otherwise read up to 256 KB of it, as slowly as
// the caller sends it, to keep the connection).
func unread(w http.ResponseWriter) {
	w.Header().Set("Connection", "close")
	_ = http.NewResponseController(w).SetReadDeadline(time.Now())
}

// newNumber draws a task's caller-facing id: 18 decimal digits, the first
// not 0, so it reads as a number and parses as a 64-bit integer.
func newNumber() string {
	n, _ := rand.Int(rand.Reader, big.NewInt(9e17))
	return n.Add(n, big.NewInt(1e17)).String()
}

// taskID is the captchaq id of a caller's task.
func taskID(producer, num string) string { return producer + "-" + num }

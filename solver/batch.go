package solver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/captcha"
	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/retry"
)

// maxBatch is the most ids one batch call asks about (the dialect's limit).
const maxBatch = classic.MaxBatchIDs

// batchStrikes is how many unreadable batch replies turn batching off.
const batchStrikes = 2

// batchBurst is how many earned, unspent calls the batcher keeps.
const batchBurst = 2

// batcher spends a Client's earned res.php calls on batch calls. It is safe
// for concurrent use; its loop runs while captchas are waiting.
type batcher struct {
	c   *Client
	gap time.Duration

	mu      sync.Mutex
	waiting map[*pollWaiter]struct{}
	tokens  float64 // earned calls not spent yet
	last    time.Time
	running bool
	off     bool
	works   bool // a batch reply was read: the service answers them
	strikes int
	stop    context.CancelFunc // cancels the batch call in flight
	kick    chan struct{}
}

func newBatcher(c *Client, gap time.Duration) *batcher {
	return &batcher{c: c, gap: gap, waiting: map[*pollWaiter]struct{}{}, kick: make(chan struct{}, 1)}
}

// newsKind is what a batch call says about one captcha.
type newsKind int

const (
	newsNotReady newsKind = iota // the service said CAPCHA_NOT_READY
	newsAnswer                   // ready, and answer holds the answer
	newsFetch                    // ready, failed, or unreadable: fetch it on its own now
	newsFailed                   // the batch call failed or was not understood: poll on your own next; err says how
	newsFatal                    // the service refuses the key; err says how
)

type pollNews struct {
	kind   newsKind
	seen   time.Time // when the service answered (mid-call)
	answer string
	err    error
}

// pollWaiter is one captcha waiting for its answer.
type pollWaiter struct {
	id     string
	direct bool      // its answer can be taken from a batch reply
	asked  time.Time // last batch call that asked about it; guarded by batcher.mu
	mu     sync.Mutex
	news   []pollNews
	signal chan struct{}
}

func (w *pollWaiter) tell(n pollNews) {
	w.mu.Lock()
	w.news = append(w.news, n)
	w.mu.Unlock()
	select {
	case w.signal <- struct{}{}:
	default:
	}
}

func (w *pollWaiter) take() []pollNews {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := w.news
	w.news = nil
	return n
}

// add registers captcha id of kind as waiting, or returns nil when batching
// is off or the kind's answers do not survive a batch reply
// (captcha.BatchNone).
func (b *batcher) add(id, kind string) *pollWaiter {
	how := captcha.BatchOf(kind)
	if how == captcha.BatchNone {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.off {
		return nil
	}
	w := &pollWaiter{id: id, direct: how == captcha.BatchAnswer, asked: b.c.now(), signal: make(chan struct{}, 1)}
	b.waiting[w] = struct{}{}
	if !b.running {
		b.running = true
		go b.run()
	}
	return w
}

// remove unregisters w; the last one out stops the loop and its call.
func (b *batcher) remove(w *pollWaiter) {
	b.mu.Lock()
	delete(b.waiting, w)
	if len(b.waiting) == 0 {
		// Calls earned by captchas that are done are not for later ones:
		// a lone captcha polls on its own schedule.
		b.tokens = 0
		if b.stop != nil {
			b.stop()
		}
	}
	b.mu.Unlock()
	b.poke()
}

// on reports whether batching is still on.
func (b *batcher) on() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return !b.off
}

// earn adds the call a captcha's schedule would have made now.
func (b *batcher) earn() {
	b.mu.Lock()
	b.tokens = min(b.tokens+1, batchBurst)
	b.mu.Unlock()
	b.poke()
}

func (b *batcher) poke() {
	select {
	case b.kick <- struct{}{}:
	default:
	}
}

func (b *batcher) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		b.mu.Lock()
		if len(b.waiting) == 0 || b.off {
			b.running = false
			b.mu.Unlock()
			return
		}
		if b.tokens < 1 {
			b.mu.Unlock()
			<-b.kick
			continue
		}
		// At most a gap: a clock that went back since the last call
		// would otherwise hold the next for as long as the jump.
		if d := min(b.gap-b.c.now().Sub(b.last), b.gap); d > 0 {
			b.mu.Unlock()
			timer.Reset(d)
			select {
			case <-timer.C:
			case <-b.kick: // maybe the last captcha left
			}
			continue
		}
		batch := b.pick()
		b.tokens--
		b.last = b.c.now()
		ctx, cancel := context.WithCancel(context.Background())
		b.stop = cancel
		b.mu.Unlock()

		if len(batch) == 1 {
			// A batch of one is the captcha's own poll.
			batch[0].tell(pollNews{kind: newsFetch})
		} else {
			b.probe(ctx, batch)
		}
		cancel()
		b.mu.Lock()
		b.stop = nil
		b.mu.Unlock()
	}
}

// pick returns the maxBatch waiting captchas asked about least recently and
// marks them asked. Callers hold b.mu.
func (b *batcher) pick() []*pollWaiter {
	all := make([]*pollWaiter, 0, len(b.waiting))
	for w := range b.waiting {
		all = append(all, w)
	}
	if len(all) > maxBatch {
		slices.SortFunc(all, func(x, y *pollWaiter) int { return x.asked.Compare(y.asked) })
		all = all[:maxBatch]
	}
	now := b.c.now()
	for _, w := range all {
		w.asked = now
	}
	return all
}

// probe makes one batch call for ws and tells each what it found; a reply
// refusing the key is told to every captcha waiting.
func (b *batcher) probe(ctx context.Context, ws []*pollWaiter) {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.id
	}
	sent := b.c.now()
	status, body, _, err := b.c.exchange(ctx, "res.php", b.c.form(url.Values{"action": {classic.ActionGet}, "ids": {strings.Join(ids, ",")}}), formType, nil)
	seen := sent.Add(b.c.now().Sub(sent) / 2)
	v := batchFailed
	var states []string
	if err == nil {
		states, v, err = parseBatch(status, body, len(ids), b.c.key)
		var e *Error
		if errors.As(err, &e) && e.Code != CodeBadReply && b.c.service.Classify(e.Code) == retry.Fatal {
			// A code that is fatal on this service only (2captcha's
			// ERROR_ZERO_BALANCE) stops the worker from a batch poll too.
			e.Class, v = retry.Fatal, batchFatal
		}
	}
	b.c.observe("res.php", true, sent, err)
	b.c.occ.polled(err)
	if ctx.Err() != nil {
		return // nobody is waiting any more
	}
	b.mu.Lock()
	switch v {
	case batchRead:
		b.strikes, b.works = 0, true
	case batchNotRead:
		if !b.works {
			b.strikes++
		}
		if b.strikes >= batchStrikes && !b.off {
			b.off = true
			b.c.log.LogAttrs(ctx, slog.LevelWarn, "the solving service does not answer batch polls (res.php action=get&ids); polling each captcha on its own",
				slog.String("reply", CodeOf(err)))
		}
	case batchFatal:
		// The reply refuses the key, not the ids asked: every captcha
		// waiting now is told, also those that registered while the call
		// was in flight. Left out, one can end up alone, and a batch of
		// one is its own poll: it hears of the refusal only if single
		// polls are refused too, else it waits out its schedule, whose
		// last polls are far apart.
		ws = slices.Collect(maps.Keys(b.waiting))
	}
	b.mu.Unlock()
	err = b.c.scrubErr(err)
	for i, w := range ws {
		switch {
		case v == batchFatal:
			w.tell(pollNews{kind: newsFatal, err: forCaptcha(err, w.id)})
		case v != batchRead:
			// A passing failure, or a reply not understood: the captcha
			// is still being solved; its next scheduled poll is its own.
			w.tell(pollNews{kind: newsFailed, err: forCaptcha(err, w.id)})
		case states[i] == CodeNotReady:
			w.tell(pollNews{kind: newsNotReady, seen: seen})
		case isAPICode(states[i]) || !w.direct:
			// A code, or an answer the reply cannot carry whole: fetch it.
			w.tell(pollNews{kind: newsFetch, seen: seen})
		default:
			w.tell(pollNews{kind: newsAnswer, seen: seen, answer: states[i]})
		}
	}
}

// forCaptcha returns a copy of a *Error err naming captcha id, so that every
// captcha of a batch gets its own; other errors are returned as they are.
func forCaptcha(err error, id string) error {
	var e *Error
	if !errors.As(err, &e) {
		return err
	}
	c := *e
	c.CaptchaID = id
	return &c
}

// scrubErr is scrub for any error.
func (c *Client) scrubErr(err error) error {
	var e *Error
	if errors.As(err, &e) {
		return c.scrub(e)
	}
	return err
}

// isAPICode reports whether a state of a batch reply is one of the service's
// codes rather than an answer: a code the client knows by name, or one
// starting ERROR. An image answer in capitals ("DZNEU") is an answer.
func isAPICode(s string) bool {
	_, known := classes[s]
	return known || strings.HasPrefix(s, "ERROR")
}

// What a batch reply was.
type batchVerdict int

const (
	batchRead    batchVerdict = iota // one state per id
	batchFailed                      // a passing failure: network, HTTP 5xx or 429, an HTML page, garbage, a busy code
	batchNotRead                     // an answer, but not to a batch poll: no batch polls here, or an answer held a "|"
	batchFatal                       // a code that refuses the key or the client (ERROR_WRONG_USER_KEY, IP_BANNED, …)
)

// parseBatch reads a batch reply: n states joined by "|", plain or as the
// request string of a JSON reply (whatever its status). Anything else comes
// with a *Error saying what it was, which never quotes a reply that may hold
// an answer (a token).
func parseBatch(status int, body []byte, n int, key string) ([]string, batchVerdict, error) {
	notRead := func(format string, args ...any) ([]string, batchVerdict, error) {
		return nil, batchNotRead, newError("res.php", CodeBadReply, fmt.Errorf("%w: "+format+" where a batch poll wants %d states", append([]any{errBadReply}, append(args, n)...)...))
	}
	if status != http.StatusOK {
		_, err := parseReply("res.php", status, body, key)
		var e *Error
		switch {
		case !errors.As(err, &e) || e.Class != retry.Fatal:
			return nil, batchFailed, err
		case strings.HasPrefix(e.Code, "HTTP_"):
			// A gateway refusing batch polls (401, 404, …) while
			// single polls may work: each captcha's own poll will tell.
			return nil, batchNotRead, err
		}
		return nil, batchFatal, err
	}
	text := string(bytes.TrimSpace(body))
	answered := false // a JSON reply with status 1
	switch {
	case strings.HasPrefix(text, "{"):
		var j classic.JSONReply
		if json.Unmarshal([]byte(text), &j) != nil {
			return nil, batchFailed, newError("res.php", CodeBadReply, fmt.Errorf("%w: a JSON reply of %d bytes that does not decode", errBadReply, len(body)))
		}
		if json.Unmarshal(j.Request, &text) != nil {
			return notRead("a JSON reply whose request is not a string")
		}
		answered = strings.Trim(string(j.Status), `" `) == "1"
	case strings.HasPrefix(text, "<"):
		// An HTML page (a gateway's, a challenge's), whatever it holds.
		_, err := parseReply("res.php", status, body, key)
		return nil, batchFailed, err
	}
	if strings.HasPrefix(text, classic.OKPrefix) || answered && !strings.Contains(text, classic.StateSep) {
		return notRead("a single answer")
	}
	states := strings.Split(text, classic.StateSep)
	switch {
	case len(states) == n && !slices.Contains(states, ""):
		return states, batchRead, nil
	case len(states) > 1:
		return notRead("%d states", len(states))
	case isAPICode(text):
		err := newError("res.php", text, nil)
		switch err.Class {
		case retry.Fatal:
			return nil, batchFatal, err
		case retry.Transient, retry.Capacity:
			return nil, batchFailed, err // ERROR_TOO_MUCH_REQUESTS, ERROR_NO_SLOT_AVAILABLE, …
		}
		return notRead("%s", text) // ERROR_WRONG_CAPTCHA_ID, ERROR_BAD_PARAMETERS, CAPCHA_NOT_READY: ids not read
	}
	return nil, batchFailed, newError("res.php", CodeBadReply, fmt.Errorf("%w: a reply of %d bytes that is neither states nor a code", errBadReply, len(body)))
}

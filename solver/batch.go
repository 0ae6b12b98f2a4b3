package solver

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/retry"
)

// Batch polling.
//
// res.php answers for many captchas in one call: action=get&ids=<id>,<id>,…
// (at most maxBatch) returns their states in the order asked, joined by "|":
// an answer, CAPCHA_NOT_READY or an error code each. One such call costs the
// service and the key's request limits what one single poll does, so a Client
// with several captchas in flight polls them together.
//
// The budget is that of single polling: every captcha keeps its poll schedule
// (fixed or adaptive), and each poll it would have made earns the Client one
// res.php call instead of being made. A batcher spends the earned calls on
// batch calls at most one per BatchGap, each asking about every captcha in
// flight (the maxBatch least recently asked when there are more). A Client
// with one captcha in flight therefore polls exactly as before; with n in
// flight, calls come up to n times as often and each finds every ready
// answer, so the pickup lag falls from about half a poll interval to about
// half of BatchGap, while the calls per solve fall once n calls a poll
// interval exceed one per BatchGap. Unspent calls beyond a burst of two are
// dropped: that is the saving.
//
// A batch reply is split on "|", so it carries only answers that cannot hold
// one and need nothing beside the text: reCAPTCHA tokens, image text, grid
// cells. Those are taken from it. A Turnstile captcha it finds ready is then
// fetched on its own with action=get&id, for the useragent the batch reply
// drops; so is a captcha for which it names an error code, so that the code
// is classified on the path it has always taken. Such a fetch is not charged
// to the budget: it returns an answer or a final code, never
// CAPCHA_NOT_READY, and the budget bounds the asking (charging it made the
// budget shrink as batching found answers sooner, before the polls that
// would have earned it). GeeTest answers hold a "|" (seccode "…|jordan"), so GeeTest captchas
// are polled on their own. A captcha's last scheduled poll is always its own,
// so giving up (CodePollLimit, CodeTimeout) means what it meant without
// batching.
//
// A service that does not answer batch calls (replies that are not one state
// per id, twice, before any that was) gets single polling from then on, with
// a warning in the log. Once one batch reply was read, a reply with more
// states than ids is an answer that held a "|" after all: every captcha asked
// is then fetched on its own, once.

// maxBatch is the most ids one batch call asks about (2captcha's limit).
const maxBatch = 100

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
	tokens  float64 // earned calls not spent yet; negative after fetches on credit
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
	newsFailed                   // the batch call failed (transient); err says how
	newsFatal                    // the batch call failed for good (the key, the URL); err says how
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
// is off or the kind's answers do not survive a batch reply (GeeTest).
func (b *batcher) add(id, kind string) *pollWaiter {
	if kind == KindGeeTest {
		return nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.off {
		return nil
	}
	w := &pollWaiter{id: id, direct: kind != KindTurnstile, asked: time.Now(), signal: make(chan struct{}, 1)}
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
	if len(b.waiting) == 0 && b.stop != nil {
		b.stop()
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
		if d := b.gap - time.Since(b.last); d > 0 {
			b.mu.Unlock()
			timer.Reset(d)
			<-timer.C
			continue
		}
		batch := b.pick()
		b.tokens--
		b.last = time.Now()
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
	now := time.Now()
	for _, w := range all {
		w.asked = now
	}
	return all
}

// probe makes one batch call for ws and tells each what it found.
func (b *batcher) probe(ctx context.Context, ws []*pollWaiter) {
	ids := make([]string, len(ws))
	for i, w := range ws {
		ids[i] = w.id
	}
	sent := time.Now()
	status, body, _, err := b.c.exchange(ctx, "res.php", b.c.form(url.Values{"action": {"get"}, "ids": {strings.Join(ids, ",")}}), formType)
	seen := sent.Add(time.Since(sent) / 2)
	notBatch := false
	if err == nil {
		var states []string
		states, notBatch, err = parseBatch(status, body, len(ids), b.c.key)
		var e *Error
		if errors.As(err, &e) {
			err = b.c.scrub(e)
		}
		if err == nil {
			b.mu.Lock()
			b.strikes, b.works = 0, true
			b.mu.Unlock()
			for i, w := range ws {
				switch st := states[i]; {
				case st == CodeNotReady:
					w.tell(pollNews{kind: newsNotReady, seen: seen})
				case w.direct && !isCode([]byte(st)):
					w.tell(pollNews{kind: newsAnswer, seen: seen, answer: st})
				default:
					w.tell(pollNews{kind: newsFetch, seen: seen})
				}
			}
			return
		}
	}
	switch {
	case ctx.Err() != nil:
		return // nobody is waiting any more
	case ClassOf(err) == retry.Fatal:
		for _, w := range ws {
			w.tell(pollNews{kind: newsFatal, err: err})
		}
		return
	case !notBatch:
		// A passing failure (network, 5xx, an HTML page): the captchas are
		// still being solved.
		for _, w := range ws {
			w.tell(pollNews{kind: newsFailed, err: err})
		}
		return
	}
	// Not a batch reply: let every captcha asked poll on its own now, and
	// after batchStrikes such replies in a row stop asking.
	b.mu.Lock()
	if !b.works {
		b.strikes++
	}
	if b.strikes >= batchStrikes && !b.off {
		b.off = true
		b.c.log.LogAttrs(ctx, slog.LevelWarn, "the solving service does not answer batch polls (res.php action=get&ids); polling each captcha on its own",
			slog.String("reply", CodeOf(err)))
	}
	b.mu.Unlock()
	for _, w := range ws {
		w.tell(pollNews{kind: newsFetch})
	}
}

// parseBatch reads a batch reply: n states joined by "|", plain or as the
// request string of a JSON reply (whatever its status). Otherwise it returns
// a *Error: the reply's own (an HTTP error, an HTML page, a Fatal key code),
// with notBatch set when the service answered but not with n states (a code
// such as ERROR_BAD_PARAMETERS from a service without batch polls, or another
// count).
func parseBatch(status int, body []byte, n int, key string) (states []string, notBatch bool, err error) {
	if status != http.StatusOK {
		_, err := parseReply("res.php", status, body, key)
		return nil, false, err
	}
	text := string(bytes.TrimSpace(body))
	if strings.HasPrefix(text, "{") {
		var j jsonReply
		var s string
		if json.Unmarshal([]byte(text), &j) == nil && json.Unmarshal(j.Request, &s) == nil {
			text = s
		}
	}
	if strings.HasPrefix(text, "<") {
		// An HTML page (a gateway's, a challenge's), whatever it holds.
		_, err := parseReply("res.php", status, body, key)
		return nil, false, err
	}
	states = strings.Split(text, "|")
	if len(states) == n && !slices.Contains(states, "") {
		return states, false, nil
	}
	if len(states) > 1 {
		// A list of another length: an answer held a "|".
		return nil, true, &Error{Code: CodeBadReply, Class: Classify(CodeBadReply), Op: "res.php",
			Err: fmt.Errorf("%w: %d states for %d ids", errBadReply, len(states), n)}
	}
	_, err = parseReply("res.php", status, body, key)
	var e *Error
	what := "one answer" // never quoted: it may be a token
	switch {
	case err == nil:
	case !errors.As(err, &e) || e.Code == CodeBadReply:
		return nil, false, err // garbage or an HTML page: passing
	case e.Class == retry.Fatal:
		return nil, false, err
	default:
		what = e.Code
	}
	return nil, true, &Error{Code: CodeBadReply, Class: Classify(CodeBadReply), Op: "res.php",
		Err: fmt.Errorf("%w: %s where a batch poll wants %d states", errBadReply, what, n)}
}

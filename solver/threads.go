// The plan the service tells: CaptchaAI's threadsinfo.

package solver

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
)

// ThreadsInfoEvery is how often a Client that learns its plan
// (Config.LearnPlan) on CaptchaAI reads the account's threads again after
// the first read, whatever that read answered: a plan bought or changed
// shows within it, and a service that tells nothing is asked no more often
// than that (one res.php call in 5 minutes, against the polls' several a
// second).
const ThreadsInfoEvery = 5 * time.Minute

// threadsInfoTimeout bounds one threadsinfo call: the first one holds the
// first captchas back until it ends.
const threadsInfoTimeout = 5 * time.Second

// errNoThreadsInfo is a threadsinfo reply that tells no plan.
var errNoThreadsInfo = errors.New("no threads in the reply")

// ThreadsInfo asks the service for the account's threads
// (res.php?action=threadsinfo, classic.ActionThreadsInfo). It reads both
// shapes the reply may take (classic.WriteThreadsInfo): the three fields
// at the top of a JSON object, or beside status 1 as request, an object
// or a string holding one. Anything else (an ERROR_ code, a plain text,
// a page) is an error, and so is a reply with no thread at all. The call
// counts for nothing else: not for an outage, not for the submission
// rate.
func (c *Client) ThreadsInfo(ctx context.Context) (classic.ThreadsInfo, error) {
	body := c.form(url.Values{"action": {classic.ActionThreadsInfo}})
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/res.php", bytes.NewReader(body))
	if err != nil {
		return classic.ThreadsInfo{}, c.scrub(newError("res.php", CodeNetwork, err))
	}
	hreq.Header.Set("Content-Type", formType)
	hreq.Header.Set("Accept", "application/json")
	resp, err := c.http.Do(hreq)
	if err != nil {
		return classic.ThreadsInfo{}, c.scrub(newError("res.php", CodeNetwork, err))
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxBody))
	if err != nil {
		return classic.ThreadsInfo{}, c.scrub(newError("res.php", CodeNetwork, err))
	}
	if resp.StatusCode != http.StatusOK {
		return classic.ThreadsInfo{}, fmt.Errorf("solver: threadsinfo: HTTP %d", resp.StatusCode)
	}
	ti, err := parseThreadsInfo(b)
	if err != nil {
		return classic.ThreadsInfo{}, fmt.Errorf("solver: threadsinfo: %w: %q", err, truncate(redact(string(bytes.TrimSpace(b)), c.key), 64))
	}
	return ti, nil
}

// parseThreadsInfo reads a threadsinfo reply (Client.ThreadsInfo).
func parseThreadsInfo(b []byte) (classic.ThreadsInfo, error) {
	var top struct {
		classic.ThreadsInfo
		Status  *int            `json:"status"`
		Request json.RawMessage `json:"request"`
	}
	if err := json.Unmarshal(b, &top); err != nil {
		return classic.ThreadsInfo{}, errNoThreadsInfo
	}
	if top.Threads > 0 {
		return top.ThreadsInfo, nil
	}
	if top.Status == nil || *top.Status != 1 || len(top.Request) == 0 {
		return classic.ThreadsInfo{}, errNoThreadsInfo
	}
	req := top.Request
	var s string
	if json.Unmarshal(req, &s) == nil {
		req = []byte(s)
	}
	var ti classic.ThreadsInfo
	if json.Unmarshal(req, &ti) != nil || ti.Threads <= 0 {
		return classic.ThreadsInfo{}, errNoThreadsInfo
	}
	return ti, nil
}

// toldPlan is when a Client reads the account's threads (tellPlan).
type toldPlan struct {
	mu      sync.Mutex
	next    time.Time     // when to read again
	started bool          // the first read began
	reading bool          // a read is on its way
	first   chan struct{} // closed when the first read ended
	silent  bool          // the service told nothing at the last read
	at      time.Time     // when the service last told threads
}

// tellPlan reads the account's threads into the plan window when a read
// is due: the first time before the first captcha is submitted (Solves
// wait for it, at most threadsInfoTimeout), then every ThreadsInfoEvery
// in the background. A plan told this way is the window's size
// (window.tell); a service that tells nothing leaves the window learning
// from refusals, said once at INFO.
func (c *Client) tellPlan(ctx context.Context) {
	if c.win == nil || c.service != CaptchaAI || !c.askPlan {
		return
	}
	t := &c.told
	t.mu.Lock()
	due := !t.reading && !c.now().Before(t.next)
	first, started := t.first, t.started
	if due {
		t.reading, t.started = true, true
	}
	t.mu.Unlock()
	switch {
	case due && !started:
		c.readThreads(ctx)
	case due:
		go c.readThreads(ctx)
	default:
		select {
		case <-first:
		case <-ctx.Done():
		}
	}
}

// SharePlan makes share of the told plan's threads this Client's: the
// pool's other workers on the account hold the rest, so that together
// they never send the service more than its plan. 0: all of them. It
// changes nothing until the service tells a plan.
func (c *Client) SharePlan(share int) {
	if c.win != nil {
		c.win.setShare(share)
	}
}

// ReadToldPlan reads the account's threads into the plan window now, if
// no read was made yet (Config.LearnPlan, on CaptchaAI): a worker calls it
// before taking tasks, so its first claims and its first report to the
// pool hold the told plan. Solve makes the same read itself otherwise.
func (c *Client) ReadToldPlan(ctx context.Context) { c.tellPlan(ctx) }

// readThreads is one read of tellPlan.
func (c *Client) readThreads(ctx context.Context) {
	t := &c.told
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), threadsInfoTimeout)
	ti, err := c.ThreadsInfo(rctx)
	cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.reading = false
	t.next = c.now().Add(ThreadsInfoEvery)
	select {
	case <-t.first:
	default:
		defer close(t.first)
	}
	if err != nil {
		if !t.silent {
			t.silent = true
			c.log.LogAttrs(ctx, slog.LevelInfo, "the service tells no plan threads: learning the plan from its capacity refusals",
				slog.String("host", c.outage.host), slog.String("error", err.Error()), slog.Duration("asks_again_in", ThreadsInfoEvery))
		}
		return
	}
	if t.silent || c.win.toldSize() != ti.Threads {
		c.log.LogAttrs(ctx, slog.LevelInfo, "plan threads told by the service",
			slog.String("host", c.outage.host), slog.Int("threads", ti.Threads), slog.Int("working_threads", ti.WorkingThreads))
	}
	t.silent, t.at = false, c.now()
	c.win.tell(ti.Threads)
}

// PlanToldAt is when the service last told the plan's threads
// (PlanToldThreads); zero when it never did.
func (c *Client) PlanToldAt() time.Time {
	c.told.mu.Lock()
	defer c.told.mu.Unlock()
	return c.told.at
}

// PoolQuota says whether a plan-wide quota bounds the captchas of the
// pool this Client works in (stream's plan threads, held around each
// Solve): while one does, the plan window (Config.LearnPlan) bounds
// nothing and learns nothing from capacity refusals, which then come of
// the quota's early hand-back, not of a plan to learn; the Client still
// reads the plan the service tells, so that the pool may set the quota
// from it. Off: the window bounds again, as it learned or was told.
func (c *Client) PoolQuota(on bool) {
	if c.win != nil {
		c.win.pool(on)
	}
}

// planAccountPrefix separates PlanAccount's hash from any other hash of
// the key: the same key hashed elsewhere gives another value.
const planAccountPrefix = "captchaq plan account v1\x00"

// PlanAccount names the account whose plan the service tells
// (PlanToldThreads), so that a pool tells its accounts' readings apart:
// the first 8 bytes of SHA-256 over planAccountPrefix and the API key,
// in hex (16 characters). It is written to the pool's stream beside the
// reading; the key is not: a CaptchaAI key is 32 hex characters (128
// bits), too many to find from its hash by trying keys, and 64 bits of
// it tell two accounts apart (a pool of 1000 accounts has one chance in
// 10^13 of two alike).
func (c *Client) PlanAccount() string {
	sum := sha256.Sum256([]byte(planAccountPrefix + c.key))
	return hex.EncodeToString(sum[:8])
}

// PlanTold reports whether the plan window is the plan the service told
// (threadsinfo), not one learned from refusals.
func (c *Client) PlanTold() bool { return c.PlanToldThreads() > 0 }

// PlanToldThreads is the plan's threads as the service told them at the
// last read that told any (threadsinfo); 0 when it never did, or without
// Config.LearnPlan.
func (c *Client) PlanToldThreads() int {
	if c.win == nil {
		return 0
	}
	return c.win.toldSize()
}

package solver

import (
	"context"
	"fmt"
	"math"
	"time"

	"github.com/captchaq/captchaq/solver/internal/schedule"
)

// Learned summarises what a Client learned of one kind's ready times
// (submission → answer ready at the service): a log-normal distribution and
// how many answers it summarises. It holds no captcha id, token or URL, so
// it can be stored and shared.
type Learned struct {
	// Median is the median ready time.
	Median time.Duration `json:"median_ns"`
	// Sigma is the standard deviation of the log of the ready time.
	Sigma float64 `json:"sigma"`
	// N is how many answers the summary stands for.
	N int `json:"n"`
	// At is when it was last updated.
	At time.Time `json:"at"`
}

// maxPooled caps Learned.N when summaries are merged: older answers then
// weigh less and less against new ones, so the pool follows a service that
// gets faster or slower.
const maxPooled = 256

// minSigma is the narrowest log-normal the fit returns.
const minSigma = schedule.MinSigma

func learnedOf(mu, sigma float64, n int, at time.Time) Learned {
	return Learned{Median: time.Duration(math.Exp(mu)), Sigma: sigma, N: n, At: at}
}

// logNanos returns μ and σ of the log of the ready time in nanoseconds.
func (l Learned) logNanos() (mu, sigma float64) {
	return math.Log(float64(l.Median)), l.Sigma
}

// valid reports what makes l unusable, nil when nothing does.
func (l Learned) valid() error {
	switch {
	case l.Median <= 0:
		return fmt.Errorf("median %v: want a positive duration", l.Median)
	case !(l.Sigma >= minSigma && l.Sigma <= 10):
		return fmt.Errorf("sigma %v: want %v to 10", l.Sigma, minSigma)
	case l.N <= 0:
		return fmt.Errorf("n %d: want 1 or more", l.N)
	}
	return nil
}

// Merge returns the summary of l's answers and fresh's together, N capped at
// 256 (older answers weigh less as new ones come), At the later of the two.
// An unusable summary counts as none.
func (l Learned) Merge(fresh Learned) Learned {
	switch {
	case fresh.valid() != nil:
		return l
	case l.valid() != nil:
		fresh.N = min(fresh.N, maxPooled)
		return fresh
	}
	// Each weighs at most maxPooled answers, and the sum cannot wrap.
	l.N, fresh.N = min(l.N, maxPooled), min(fresh.N, maxPooled)
	m1, s1 := l.logNanos()
	m2, s2 := fresh.logNanos()
	mu, sigma := pool(m1, s1, float64(l.N), m2, s2, float64(fresh.N))
	at := l.At
	if fresh.At.After(at) {
		at = fresh.At
	}
	return learnedOf(mu, sigma, min(l.N+fresh.N, maxPooled), at)
}

// TimingStore keeps learned timings beyond one Client: across restarts, and
// shared by a pool of workers. Implementations must be safe for concurrent
// use.
type TimingStore interface {
	// MergeTimings adds fresh (by kind: what the Client learned since its
	// last call) to what the store holds, with Learned.Merge, and returns
	// what the store holds then, for every kind it knows.
	MergeTimings(ctx context.Context, fresh map[string]Learned) (map[string]Learned, error)
}

// ShareTimings merges what c learned since its last share into store and
// plans every kind with what the store then holds (pooled with c's own
// answers) until the next share. Call it at start, to begin with what a
// pool learned, and then every so often. When the merge fails, c keeps
// what it had and shares those answers next time.
func (c *Client) ShareTimings(ctx context.Context, store TimingStore) error {
	fresh := c.poller.kindsLearned(c.now())
	pooled, err := store.MergeTimings(ctx, fresh)
	if err != nil {
		c.poller.unshare(fresh)
		return fmt.Errorf("solver: share timings: %w", err)
	}
	c.poller.setPriors(pooled)
	return nil
}

// ShareSoon receives when what c learned should be shared before the next
// periodic ShareTimings: a kind the pool has not learned yet (fewer than
// minLearned answers in what c last heard of the store) got an answer.
// Receives are coalesced; ShareTimings shares whatever is new.
func (c *Client) ShareSoon() <-chan struct{} {
	c.poller.mu.Lock()
	defer c.poller.mu.Unlock()
	return c.poller.soonChan()
}

// AdoptTimings plans the kinds of pooled with what another worker just
// merged into the pool's store (the values the store holds, as
// MergeTimings returns them), without sharing anything of c's. A value
// older than what c holds of its kind (Learned.At) is ignored: values
// stored one after the other may be heard out of order.
func (c *Client) AdoptTimings(pooled map[string]Learned) {
	newer := make(map[string]Learned, len(pooled))
	c.poller.mu.Lock()
	for kind, l := range pooled {
		if ks, ok := c.poller.kinds[kind]; !ok || !l.At.Before(ks.prior.At) {
			newer[kind] = l
		}
	}
	c.poller.mu.Unlock()
	c.poller.setPriors(newer)
}

// Knows reports whether c plans kind's polls from learned ready times (its
// own answers or the pool's), not the documented fixed schedule.
func (c *Client) Knows(kind string) bool {
	c.poller.mu.Lock()
	defer c.poller.mu.Unlock()
	ks, ok := c.poller.kinds[kind]
	return ok && ks.learned()
}

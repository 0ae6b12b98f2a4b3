package solver

import (
	"sync"
	"time"
)

const (
	learnWindow = 64 // observations kept per kind
	minLearned  = 10 // observations before the adaptive schedule is used
	replanEvery = 4  // new observations before the schedule is recomputed
)

// readyWindow is an observation: the captcha became ready in (lo, hi] after
// submission.
type readyWindow struct{ lo, hi time.Duration }

// poller learns solve times per kind and plans poll schedules. It is safe for
// concurrent use.
type poller struct {
	mu    sync.Mutex
	kinds map[string]*kindStats
}

type kindStats struct {
	obs      []readyWindow // ring of the last learnWindow observations
	next     int           // ring position of the next observation
	fresh    int           // observations since plan was computed
	plan     []time.Duration
	planned  bool
	planFrom kindTiming
}

// observe records that a captcha of kind became ready in (lo, hi].
func (p *poller) observe(kind string, lo, hi time.Duration) {
	if hi <= 0 || lo < 0 || lo > hi {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	if len(ks.obs) < learnWindow {
		ks.obs = append(ks.obs, readyWindow{lo, hi})
	} else {
		ks.obs[ks.next] = readyWindow{lo, hi}
	}
	ks.next = (ks.next + 1) % learnWindow
	ks.fresh++
}

func (p *poller) stats(kind string) *kindStats {
	if p.kinds == nil {
		p.kinds = map[string]*kindStats{}
	}
	ks, ok := p.kinds[kind]
	if !ok {
		ks = &kindStats{}
		p.kinds[kind] = ks
	}
	return ks
}

// schedule returns the offsets from submission at which to call res.php for
// a captcha of kind. The slice must not be modified.
func (p *poller) schedule(kind string, k kindTiming) []time.Duration {
	if k.fixed {
		return k.fixedSchedule()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ks := p.stats(kind)
	if len(ks.obs) < minLearned {
		return k.fixedSchedule()
	}
	if !ks.planned || ks.fresh >= replanEvery || ks.planFrom != k {
		ks.plan = k.extend(planAdaptive(ks.obs, k))
		ks.planned, ks.fresh, ks.planFrom = true, 0, k
	}
	return ks.plan
}

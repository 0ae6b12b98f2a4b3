package provider

import (
	"cmp"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/solver"
)

// Which providers a task's attempt asks, in what order, and when one is
// passed over.

// movesOn reports whether a submission that failed with err, accepted by
// no one, goes on to the next provider: the provider is out (no answer,
// HTTP 5xx, a key refused, no funds) and the captcha was surely not paid
// (its reply was not lost). A task's own fault (Permanent), a full plan
// (a capacity wait) and a lost reply stay with the caller.
func movesOn(err error) bool {
	if solver.MayBePaid(err) {
		return false
	}
	switch solver.ClassOf(err) {
	case retry.Transient, retry.Fatal:
		return true
	case retry.Capacity:
		// In.php not answering, or answering 5xx (a capacity wait for a
		// Client alone); not a full plan or a rate limit, which waiting
		// on the provider cures at no cost.
		code := solver.CodeOf(err)
		return code == solver.CodeUnreachable || strings.HasPrefix(code, "HTTP_5")
	}
	return false
}

// route is the members that solve method: the weighted primaries in an
// order drawn by their weights (weighted), the other primaries, then the
// fallbacks, each in the file's order.
func (s *Set) route(method string) []*member {
	var out []*member
	for _, m := range s.members {
		if m.Entry.Role == Primary && m.Entry.Weight > 0 && m.solves(method) {
			out = append(out, m)
		}
	}
	weighted(out)
	for _, role := range []Role{Primary, Fallback} {
		for _, m := range s.members {
			if m.Entry.Role == role && m.Entry.Weight == 0 && m.solves(method) {
				out = append(out, m)
			}
		}
	}
	return out
}

// askedLast moves the provider called name to the end of route: it called
// the task's captcha unsolvable on the attempt before, and another provider
// of the method, whatever its role, may solve it (its workers, its model).
// It is still asked when every other one is out, over budget or refuses.
func askedLast(route []*member, name string) []*member {
	i := slices.IndexFunc(route, func(m *member) bool { return m.Entry.Name == name })
	if i < 0 {
		return route
	}
	out := slices.Concat(route[:i], route[i+1:])
	return append(out, route[i])
}

// weighted orders ms by a draw without replacement, each next one with
// probability its weight over the weights left (Efraimidis and Spirakis:
// the largest u^(1/w) first, u uniform in (0, 1)).
func weighted(ms []*member) {
	if len(ms) < 2 {
		return
	}
	keys := map[*member]float64{}
	for _, m := range ms {
		keys[m] = math.Pow(1-rand.Float64(), 1/float64(m.Entry.Weight))
	}
	slices.SortFunc(ms, func(a, b *member) int { return cmp.Compare(keys[b], keys[a]) })
}

// solves reports whether m is given method.
func (m *member) solves(method string) bool { return slices.Contains(m.methods, method) }

// named is the member called name, or the first primary for "" (a
// captcha accepted before the worker had providers); nil when none is.
func (s *Set) named(name string) *member {
	for _, m := range s.members {
		if m.Entry.Name == name || name == "" && m.Entry.Role == Primary {
			return m
		}
	}
	return nil
}

// refused reports whether m is passed over at now, and for what code.
func (m *member) refused(now time.Time) (string, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.outCode, now.Before(m.outUntil)
}

// refuse passes m over until until.
func (m *member) refuse(until time.Time, code string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.outUntil, m.outCode = until, code
}

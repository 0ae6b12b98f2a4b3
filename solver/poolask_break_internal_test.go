package solver

import (
	"testing"
	"time"
)

// sharedPool is a Pool of several clients in one process: each reports
// under its name and hears the others' last reports.
type sharedPool struct {
	name    string
	reports map[string]Occupancy
}

func (p sharedPool) Report(o Occupancy) { p.reports[p.name] = o }
func (p sharedPool) Others() []Occupancy {
	var out []Occupancy
	for n, o := range p.reports {
		if n != p.name {
			out = append(out, o)
		}
	}
	return out
}

// TestPoolAskNotHeldByAClientThatCannotAsk: two clients of a pool, each
// with an image 2.3 s and 2.2 s old (about 0.3 and 0.2 threads probably
// free, 0.5 together). The one with more has spent its res.php credit on
// its planned polls (on 2captcha the schedule alone reaches the pace), or
// is quiet after a rate refusal: it cannot ask. The pool's thread must
// still be asked about by the other, which has credit, not left to a
// client that will not ask until its credit comes back.
func TestPoolAskNotHeldByAClientThatCannotAsk(t *testing.T) {
	t.Parallel()
	for _, why := range []string{"no credit", "quiet after a 429"} {
		reports := map[string]Occupancy{}
		now := time.Now()
		mk := func(name string, age time.Duration) (*occupancy, *holder) {
			c := offlineClient(t)
			learnImagesIn2To3s(c)
			c.now = func() time.Time { return now }
			o := newOccupancy(c, 50*time.Millisecond, time.Hour, DefaultPollInterval)
			// The test makes the estimates: no goroutine of its own.
			o.running = true
			o.z = zMax
			o.pool = sharedPool{name: name, reports: reports}
			return o, o.add(KindImage, c.timing.forKind(KindImage), now.Add(-age), nil)
		}
		a, ha := mk("a", 2300*time.Millisecond)
		b, hb := mk("b", 2200*time.Millisecond)
		switch why {
		case "no credit":
			for range 4 {
				a.polled(nil)
			}
		default:
			a.polled(newError("res.php", "ERROR_TOO_MUCH_REQUESTS", nil))
		}
		for range 3 {
			for _, o := range []*occupancy{a, b} {
				o.mu.Lock()
				o.handBack(now)
				o.mu.Unlock()
			}
			now = now.Add(time.Millisecond)
		}
		ra, rb := a.own.Ready, b.own.Ready
		if !(ra > rb && rb > 0 && ra < askAt && ra+rb >= askAt) {
			t.Fatalf("%s: threads probably free %.2f and %.2f, want the first more, each less than %v, together %v or more", why, ra, rb, askAt, askAt)
		}
		if len(ha.confirm) > 0 {
			t.Fatalf("%s: a client that cannot ask asked", why)
		}
		if len(hb.confirm) == 0 {
			t.Errorf("%s: the pool's %.2f threads probably free were asked about by nobody: the client with %.2f cannot ask, the one with %.2f left it to it",
				why, ra+rb, ra, rb)
		}
	}
}

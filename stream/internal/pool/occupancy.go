package pool

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/topology"
)

// OccupancySubject is where the workers of a pool tell each other, on core
// NATS (nothing is stored), what each estimates of its captchas at the
// service: {"worker":"<name>","v":V,"free":F,"ready":R,"held":true}
// (solver.Occupancy: the variance of how many of its captchas are still
// being solved, how many of its plan threads are probably free less its
// share of the margin and before it, and whether it cannot ask the service
// early now; ready and held are left out when zero, and a worker of an
// earlier version sends neither). It holds no captcha, token or URL. With
// it the pool hands plan threads back early with one safety margin and one
// rounding, not one per worker, and the worker likeliest to find a free
// thread asks.
const OccupancySubject = "captchaq.occupancy"

// occupancyFresh is how long a worker's report counts: a worker reports
// within 0.4 s while it has captchas in flight (about five a second at
// most, sooner when its estimate moves), and 0 when it has none, so a
// report this old is of a worker gone.
const occupancyFresh = time.Second

// maxReported bounds a report's numbers: no worker has that many captchas
// in flight.
const maxReported = 1 << 16

// occupancyReport is one message on OccupancySubject.
type occupancyReport struct {
	Worker string `json:"worker"`
	solver.Occupancy
}

// Occupancy is a solver.Pool over OccupancySubject.
type Occupancy struct {
	nc     *nats.Conn
	name   string
	mu     sync.Mutex
	others map[string]reported
}

type reported struct {
	solver.Occupancy
	at time.Time // monotonic: when it arrived
}

var _ solver.Pool = (*Occupancy)(nil)

// JoinOccupancy subscribes to the pool's reports; the returned function
// unsubscribes.
func JoinOccupancy(nc *nats.Conn, name string) (*Occupancy, func(), error) {
	p := &Occupancy{nc: nc, name: name, others: map[string]reported{}}
	sub, err := nc.Subscribe(OccupancySubject, p.receive)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { _ = sub.Unsubscribe() }, nil
}

// receive records another worker's report; anything unreadable or out of
// range is ignored.
func (p *Occupancy) receive(m *nats.Msg) {
	var r occupancyReport
	if json.Unmarshal(m.Data, &r) != nil || r.Worker == "" || r.Worker == p.name ||
		!(r.V >= 0 && r.V <= maxReported) || !(math.Abs(r.Free) <= maxReported) {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.Occupancy == (solver.Occupancy{}) {
		delete(p.others, r.Worker) // nothing in flight
		return
	}
	p.others[r.Worker] = reported{Occupancy: r.Occupancy, at: time.Now()}
}

// Report publishes this worker's estimate; a publish that fails (the
// connection down) only leaves the others with what they had.
func (p *Occupancy) Report(o solver.Occupancy) {
	b, _ := json.Marshal(occupancyReport{Worker: p.name, Occupancy: o})
	_ = p.nc.Publish(OccupancySubject, b)
}

// Others returns the fresh reports of the other workers.
func (p *Occupancy) Others() []solver.Occupancy {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]solver.Occupancy, 0, len(p.others))
	now := time.Now()
	for name, r := range p.others {
		if now.Sub(r.at) > occupancyFresh {
			delete(p.others, name)
			continue
		}
		out = append(out, r.Occupancy)
	}
	return out
}

// timingsSubject is the prefix of the subjects the workers write the
// timings bucket's keys on, in JetStream domain domain ("": none): every
// merge a worker writes is published there, and a core subscription sees
// it as it is stored (no consumer, which a worker's role may not create).
// Workers that reach the bucket through another domain's prefix write on
// other subjects, and a hub sends nothing under its domain's prefix over a
// leaf link, so at a site the subscription hears that site's workers only
// (stream's TestSiteHearsOnlyItsOwnWritesUnderHubsDomain): the others'
// merges reach this worker at its periodic share.
func timingsSubject(domain string) string {
	if domain == "" {
		return "$KV." + topology.TimingsBucket + "."
	}
	return "$JS." + domain + ".API.$KV." + topology.TimingsBucket + "."
}

// FollowTimings plans with every kind's timings as soon as any worker of
// the pool merges them into the bucket (through domain), and, when
// follow is not nil, calls it with the plan windows the pool's workers
// wrote (Timings.PutPlanWindow) as each write lands, without those of
// workers silent for WindowFresh (now tells the time on the broker's
// clock, as the windows are stamped: PlanWindow.At); the returned
// function stops. One wildcard subscription serves both, and none may
// name one key: at a site, the hub takes a literal subject under its
// domain's prefix for one it may not send over the link and closes the
// site's link at every reconnect (stream's
// TestLiteralSubscriptionUnderHubsDomainCutsTheSiteLink).
func FollowTimings(nc *nats.Conn, domain string, adopt func(map[string]solver.Learned), now func() time.Time, follow func(map[string]PlanWindow)) (func(), error) {
	pre := timingsSubject(domain)
	sub, err := nc.Subscribe(pre+"*", func(m *nats.Msg) {
		kind := strings.TrimPrefix(m.Subject, pre)
		if len(m.Data) == 0 {
			return
		}
		if kind == planWindowsKey {
			if follow != nil {
				followWindows(m.Data, now, follow)
			}
			return
		}
		if !validKey.MatchString(kind) {
			return
		}
		var l solver.Learned
		if json.Unmarshal(m.Data, &l) != nil {
			return
		}
		adopt(map[string]solver.Learned{kind: l})
	})
	if err != nil {
		return nil, err
	}
	return func() { _ = sub.Unsubscribe() }, nil
}

// followWindows calls follow with the fresh plan windows of a write of
// the windows' key (FollowTimings).
func followWindows(data []byte, now func() time.Time, follow func(map[string]PlanWindow)) {
	ws := map[string]PlanWindow{}
	if json.Unmarshal(data, &ws) != nil {
		return
	}
	ref := now()
	if last := lastWritten(ws); !last.IsZero() {
		ref = earliest(ref, last)
	}
	fresh(ws, ref)
	follow(ws)
}

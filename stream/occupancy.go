package stream

import (
	"encoding/json"
	"math"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/solver"
)

// OccupancySubject is where the workers of a pool tell each other, on core
// NATS (nothing is stored), how uncertain each is of how many of its
// captchas the service is still solving: {"worker":"<name>","v":V}, V being
// the variance of that count (solver.Pool). It holds no captcha, token or
// URL. With it the pool keeps one safety margin when it hands plan
// threads back early, not one per worker.
const OccupancySubject = "captchaq.occupancy"

// occupancyFresh is how long a worker's report counts: a worker reports at
// every estimate (a fifth of a second) while it has captchas in flight,
// and 0 when it has none, so a report this old is of a worker gone.
const occupancyFresh = time.Second

// maxVariance bounds a report: the variance of a count of captchas is at
// most a quarter of their number, and no worker has more in flight.
const maxVariance = 1 << 16

// occupancyReport is one message on OccupancySubject.
type occupancyReport struct {
	Worker string  `json:"worker"`
	V      float64 `json:"v"`
}

// occupancyPool is a solver.Pool over OccupancySubject.
type occupancyPool struct {
	nc     *nats.Conn
	name   string
	mu     sync.Mutex
	others map[string]reported
}

type reported struct {
	v  float64
	at time.Time // monotonic: when it arrived
}

var _ solver.Pool = (*occupancyPool)(nil)

// joinOccupancy subscribes to the pool's reports; the returned function
// unsubscribes.
func joinOccupancy(nc *nats.Conn, name string) (*occupancyPool, func(), error) {
	p := &occupancyPool{nc: nc, name: name, others: map[string]reported{}}
	sub, err := nc.Subscribe(OccupancySubject, p.receive)
	if err != nil {
		return nil, nil, err
	}
	return p, func() { _ = sub.Unsubscribe() }, nil
}

// receive records another worker's report; anything unreadable or out of
// range is ignored.
func (p *occupancyPool) receive(m *nats.Msg) {
	var r occupancyReport
	if json.Unmarshal(m.Data, &r) != nil || r.Worker == "" || r.Worker == p.name ||
		math.IsNaN(r.V) || r.V < 0 || r.V > maxVariance {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if r.V == 0 {
		delete(p.others, r.Worker)
		return
	}
	p.others[r.Worker] = reported{v: r.V, at: time.Now()}
}

// Report publishes this worker's variance; a publish that fails (the
// connection down) only leaves the others with what they had.
func (p *occupancyPool) Report(v float64) {
	b, _ := json.Marshal(occupancyReport{Worker: p.name, V: v})
	_ = p.nc.Publish(OccupancySubject, b)
}

// Others sums the fresh reports of the other workers.
func (p *occupancyPool) Others() float64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	var sum float64
	now := time.Now()
	for name, r := range p.others {
		if now.Sub(r.at) > occupancyFresh {
			delete(p.others, name)
			continue
		}
		sum += r.v
	}
	return sum
}

// timingsSubject is the subject of the timings bucket's keys: every merge
// a worker writes is published there, and a core subscription sees it as
// it is stored (no consumer, which a worker's role may not create).
const timingsSubject = "$KV." + TimingsBucket + "."

// followTimings plans with every kind's timings as soon as any worker of
// the pool merges them into the bucket; the returned function stops.
func followTimings(nc *nats.Conn, adopt func(map[string]solver.Learned)) (func(), error) {
	sub, err := nc.Subscribe(timingsSubject+"*", func(m *nats.Msg) {
		kind := strings.TrimPrefix(m.Subject, timingsSubject)
		if kind == planWindowsKey || !validKey.MatchString(kind) || len(m.Data) == 0 {
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

// Package metrics counts what captchaq's workers do and serves it in the
// Prometheus exposition formats, with /healthz and /readyz beside it.
//
// The metrics live in a prometheus/client_golang registry, with the Go
// runtime's and the process's collectors beside captchaq's own (NewWorker);
// this package keeps a small facade over it (Counter, Gauge, Histogram with
// label values in a fixed order) so that label values stay bounded in one
// place. What client_golang costs is measured in docs/observability.md
// ("Metrics and stats").
package metrics

import (
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
)

// Registry holds metric families and serves them. It is safe for concurrent
// use.
type Registry struct {
	reg *prometheus.Registry

	mu    sync.Mutex
	names map[string]bool
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{reg: prometheus.NewRegistry(), names: map[string]bool{}}
}

// WithRuntime adds the Go runtime's collector (go_*: goroutines, memory,
// GC) and the process's (process_*: CPU, resident memory, open files) and
// returns r.
func (r *Registry) WithRuntime() *Registry {
	r.reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return r
}

// Prometheus returns the client_golang registry underneath, to register
// more collectors.
func (r *Registry) Prometheus() *prometheus.Registry { return r.reg }

// check panics on a name Prometheus's classic scheme does not allow, or one
// registered before: metric names are fixed in the code, so a bad one is a
// programming error.
func (r *Registry) check(name string, labels []string) {
	if !validName(name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", name))
	}
	for _, l := range labels {
		if !validName(l) || l == "le" {
			panic(fmt.Sprintf("metrics: invalid label name %q", l))
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.names[name] {
		panic(fmt.Sprintf("metrics: %s registered twice", name))
	}
	r.names[name] = true
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for i, c := range s {
		ok := c == '_' || c == ':' || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (i > 0 && c >= '0' && c <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// Counter is a family of counters: values that only go up.
type Counter struct{ vec *prometheus.CounterVec }

// Counter registers a counter family with the given label names.
func (r *Registry) Counter(name, help string, labels ...string) *Counter {
	r.check(name, labels)
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: help}, labels)
	r.reg.MustRegister(vec)
	return &Counter{vec}
}

// Add adds v (≥ 0; negative values are ignored) to the series of the label
// values, given in the order of the family's label names.
func (c *Counter) Add(v float64, values ...string) {
	if v < 0 || math.IsNaN(v) {
		return
	}
	c.vec.WithLabelValues(values...).Add(v)
}

// Inc adds one.
func (c *Counter) Inc(values ...string) { c.vec.WithLabelValues(values...).Inc() }

// Gauge is a family of values that go up and down.
type Gauge struct{ vec *prometheus.GaugeVec }

// Gauge registers a gauge family with the given label names.
func (r *Registry) Gauge(name, help string, labels ...string) *Gauge {
	r.check(name, labels)
	vec := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: help}, labels)
	r.reg.MustRegister(vec)
	return &Gauge{vec}
}

// Set sets the series of the label values to v.
func (g *Gauge) Set(v float64, values ...string) { g.vec.WithLabelValues(values...).Set(v) }

// Add adds v (which may be negative) to the series of the label values.
func (g *Gauge) Add(v float64, values ...string) { g.vec.WithLabelValues(values...).Add(v) }

// Histogram is a family of histograms: counts of observations per bucket,
// their sum and their count.
type Histogram struct{ vec *prometheus.HistogramVec }

// Histogram registers a histogram family with the given bucket upper bounds
// (sorted, +Inf implied) and label names.
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *Histogram {
	r.check(name, labels)
	b := slices.Clone(buckets)
	slices.Sort(b)
	b = slices.Compact(b)
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	vec := prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name, Help: help, Buckets: b}, labels)
	r.reg.MustRegister(vec)
	return &Histogram{vec}
}

// Observe records v in the series of the label values.
func (h *Histogram) Observe(v float64, values ...string) {
	if math.IsNaN(v) {
		return
	}
	h.vec.WithLabelValues(values...).Observe(v)
}

// WriteText writes every family in the Prometheus text format 0.0.4, sorted
// by name, series by label values (label pairs by label name).
func (r *Registry) WriteText(w io.Writer) error {
	mfs, err := r.reg.Gather()
	if err != nil {
		return err
	}
	for _, mf := range mfs {
		if _, err := expfmt.MetricFamilyToText(w, mf); err != nil {
			return err
		}
	}
	return nil
}

// ContentType is the media type of the text exposition format, which
// Handler serves to a scraper that asks for nothing else.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the registry's metrics, in the format the scraper asks for
// (text, OpenMetrics or protobuf).
func (r *Registry) Handler() http.Handler {
	return promhttp.HandlerFor(r.reg, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError})
}

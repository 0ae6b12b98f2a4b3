// Package metrics counts what captchaq's workers do and serves it in the
// Prometheus text exposition format, with /healthz and /readyz beside it.
//
// The exposition is written here, in about two hundred lines, rather than
// with prometheus/client_golang: captchaq needs counters, gauges and
// histograms with labels and one text endpoint, and client_golang would add
// a dozen modules (protobuf, procfs, common/expfmt…) to a binary whose
// dependency tree is otherwise nats and backoff. The format is small and
// stable (text format 0.0.4); TestExposition checks it line by line.
package metrics

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Registry holds metric families and writes them in the Prometheus text
// format. It is safe for concurrent use.
type Registry struct {
	mu       sync.Mutex
	families []*family
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry { return &Registry{} }

type kind string

const (
	kindCounter   kind = "counter"
	kindGauge     kind = "gauge"
	kindHistogram kind = "histogram"
)

type family struct {
	name, help string
	kind       kind
	labels     []string
	buckets    []float64 // histograms: upper bounds, ascending, without +Inf

	mu     sync.Mutex
	series map[string]*series
}

type series struct {
	values []string // label values, in the family's label order
	value  float64  // counter or gauge
	counts []uint64 // histogram: per bucket, not cumulative; last is +Inf
	sum    float64  // histogram
	count  uint64   // histogram
}

func (r *Registry) add(f *family) *family {
	if !validName(f.name) {
		panic(fmt.Sprintf("metrics: invalid metric name %q", f.name))
	}
	for _, l := range f.labels {
		if !validName(l) || l == "le" {
			panic(fmt.Sprintf("metrics: invalid label name %q", l))
		}
	}
	f.series = map[string]*series{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range r.families {
		if g.name == f.name {
			panic(fmt.Sprintf("metrics: %s registered twice", f.name))
		}
	}
	r.families = append(r.families, f)
	return f
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

// get returns the series for the label values, creating it.
func (f *family) get(values []string) *series {
	if len(values) != len(f.labels) {
		panic(fmt.Sprintf("metrics: %s takes %d label values, got %d", f.name, len(f.labels), len(values)))
	}
	key := strings.Join(values, "\xff")
	s, ok := f.series[key]
	if !ok {
		s = &series{values: slices.Clone(values)}
		if f.kind == kindHistogram {
			s.counts = make([]uint64, len(f.buckets)+1)
		}
		f.series[key] = s
	}
	return s
}

// Counter is a family of counters: values that only go up.
type Counter struct{ f *family }

// Counter registers a counter family with the given label names.
func (r *Registry) Counter(name, help string, labels ...string) *Counter {
	return &Counter{r.add(&family{name: name, help: help, kind: kindCounter, labels: labels})}
}

// Add adds v (≥ 0; negative values are ignored) to the series of the label
// values, given in the order of the family's label names.
func (c *Counter) Add(v float64, values ...string) {
	if v < 0 || math.IsNaN(v) {
		return
	}
	c.f.mu.Lock()
	c.f.get(values).value += v
	c.f.mu.Unlock()
}

// Inc adds one.
func (c *Counter) Inc(values ...string) { c.Add(1, values...) }

// Gauge is a family of values that go up and down.
type Gauge struct{ f *family }

// Gauge registers a gauge family with the given label names.
func (r *Registry) Gauge(name, help string, labels ...string) *Gauge {
	return &Gauge{r.add(&family{name: name, help: help, kind: kindGauge, labels: labels})}
}

// Set sets the series of the label values to v.
func (g *Gauge) Set(v float64, values ...string) {
	g.f.mu.Lock()
	g.f.get(values).value = v
	g.f.mu.Unlock()
}

// Add adds v (which may be negative) to the series of the label values.
func (g *Gauge) Add(v float64, values ...string) {
	g.f.mu.Lock()
	g.f.get(values).value += v
	g.f.mu.Unlock()
}

// Histogram is a family of histograms: counts of observations per bucket,
// their sum and their count.
type Histogram struct{ f *family }

// Histogram registers a histogram family with the given bucket upper bounds
// (sorted, +Inf implied) and label names.
func (r *Registry) Histogram(name, help string, buckets []float64, labels ...string) *Histogram {
	b := slices.Clone(buckets)
	slices.Sort(b)
	b = slices.Compact(b)
	if n := len(b); n > 0 && math.IsInf(b[n-1], 1) {
		b = b[:n-1]
	}
	return &Histogram{r.add(&family{name: name, help: help, kind: kindHistogram, labels: labels, buckets: b})}
}

// Observe records v in the series of the label values.
func (h *Histogram) Observe(v float64, values ...string) {
	if math.IsNaN(v) {
		return
	}
	h.f.mu.Lock()
	s := h.f.get(values)
	i, _ := slices.BinarySearch(h.f.buckets, v) // first bound ≥ v; len: +Inf
	s.counts[i]++
	s.sum += v
	s.count++
	h.f.mu.Unlock()
}

// WriteText writes every family in the Prometheus text format 0.0.4, in the
// order they were registered, series sorted by label values.
func (r *Registry) WriteText(w io.Writer) error {
	r.mu.Lock()
	families := slices.Clone(r.families)
	r.mu.Unlock()
	bw := bufio.NewWriter(w)
	for _, f := range families {
		f.write(bw)
	}
	return bw.Flush()
}

func (f *family) write(w *bufio.Writer) {
	fmt.Fprintf(w, "# HELP %s %s\n# TYPE %s %s\n", f.name, escapeHelp(f.help), f.name, f.kind)
	f.mu.Lock()
	defer f.mu.Unlock()
	keys := make([]string, 0, len(f.series))
	for k := range f.series {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		s := f.series[k]
		if f.kind != kindHistogram {
			fmt.Fprintf(w, "%s%s %s\n", f.name, labelText(f.labels, s.values, "", ""), formatFloat(s.value))
			continue
		}
		var cum uint64
		for i, c := range s.counts {
			cum += c
			le := "+Inf"
			if i < len(f.buckets) {
				le = formatFloat(f.buckets[i])
			}
			fmt.Fprintf(w, "%s_bucket%s %d\n", f.name, labelText(f.labels, s.values, "le", le), cum)
		}
		fmt.Fprintf(w, "%s_sum%s %s\n", f.name, labelText(f.labels, s.values, "", ""), formatFloat(s.sum))
		fmt.Fprintf(w, "%s_count%s %d\n", f.name, labelText(f.labels, s.values, "", ""), s.count)
	}
}

func labelText(names, values []string, extraName, extraValue string) string {
	if len(names) == 0 && extraName == "" {
		return ""
	}
	var b strings.Builder
	b.WriteByte('{')
	for i, n := range names {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=\"%s\"", n, escapeLabel(values[i]))
	}
	if extraName != "" {
		if len(names) > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, "%s=\"%s\"", extraName, escapeLabel(extraValue))
	}
	b.WriteByte('}')
	return b.String()
}

var (
	labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)
	helpEscaper  = strings.NewReplacer(`\`, `\\`, "\n", `\n`)
)

func escapeLabel(s string) string { return labelEscaper.Replace(s) }
func escapeHelp(s string) string  { return helpEscaper.Replace(s) }

func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case math.IsInf(v, -1):
		return "-Inf"
	case math.IsNaN(v):
		return "NaN"
	}
	return strconv.FormatFloat(v, 'g', -1, 64)
}

// ContentType is the media type of the text exposition format.
const ContentType = "text/plain; version=0.0.4; charset=utf-8"

// Handler serves the registry's metrics.
func (r *Registry) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", ContentType)
		_ = r.WriteText(w)
	})
}

package main

import (
	"bufio"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

// clock stamps tasks by index: when each was submitted and when its solving
// started, in nanoseconds since the run's epoch. Safe for concurrent use;
// every index is written by one goroutine.
type clock struct {
	epoch time.Time
	sub   []atomic.Int64
	start []atomic.Int64
	done  atomic.Int64 // tasks whose solving started
	last  atomic.Int64 // latest completion, ns since epoch
	all   chan struct{}
	n     int64
}

func newClock(n int) *clock {
	return &clock{epoch: time.Now(), sub: make([]atomic.Int64, n), start: make([]atomic.Int64, n), all: make(chan struct{}), n: int64(n)}
}

func (c *clock) now() int64 { return int64(time.Since(c.epoch)) }

// submitted stamps task i just before its publish.
func (c *clock) submitted(i int) { c.sub[i].Store(c.now()) }

// started stamps task i when the solver (handler) is called. Repeated calls
// (redeliveries) keep the first stamp.
func (c *clock) started(i int) {
	if i < 0 || i >= len(c.start) {
		return
	}
	c.start[i].CompareAndSwap(0, c.now())
}

// completed counts a task whose handling finished (result stored, acked).
func (c *clock) completed() {
	c.last.Store(c.now())
	if c.done.Add(1) == c.n {
		close(c.all)
	}
}

// latencies returns submit→start latencies of the tasks that started.
func (c *clock) latencies() []time.Duration {
	out := make([]time.Duration, 0, len(c.sub))
	for i := range c.sub {
		s, st := c.sub[i].Load(), c.start[i].Load()
		if s > 0 && st > 0 {
			out = append(out, time.Duration(st-s))
		}
	}
	slices.Sort(out)
	return out
}

// firstSubmit is the earliest submit stamp.
func (c *clock) firstSubmit() int64 {
	first := int64(-1)
	for i := range c.sub {
		if s := c.sub[i].Load(); s > 0 && (first < 0 || s < first) {
			first = s
		}
	}
	return first
}

func percentile(sorted []time.Duration, p float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	k := int(float64(len(sorted)-1) * p)
	return sorted[k]
}

func mean(ds []time.Duration) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	var sum time.Duration
	for _, d := range ds {
		sum += d
	}
	return sum / time.Duration(len(ds))
}

// procMem returns VmRSS and VmHWM (peak RSS) of a process in bytes.
func procMem(pid int) (rss, hwm int64, err error) {
	path := "/proc/self/status"
	if pid > 0 {
		path = fmt.Sprintf("/proc/%d/status", pid)
	}
	f, err := os.Open(path)
	if err != nil {
		return 0, 0, fmt.Errorf("read memory of process %d: %w", pid, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseInt(fields[1], 10, 64)
		switch fields[0] {
		case "VmRSS:":
			rss = kb << 10
		case "VmHWM:":
			hwm = kb << 10
		}
	}
	return rss, hwm, sc.Err()
}

func mib(b int64) string { return fmt.Sprintf("%.1f MiB", float64(b)/(1<<20)) }

func ms(d time.Duration) string {
	switch {
	case d >= 10*time.Second:
		return fmt.Sprintf("%.1f s", d.Seconds())
	case d >= time.Millisecond:
		return fmt.Sprintf("%.2f ms", float64(d)/float64(time.Millisecond))
	default:
		return fmt.Sprintf("%.0f µs", float64(d)/float64(time.Microsecond))
	}
}

// table is a markdown table.
type table struct {
	head []string
	rows [][]string
}

func (t *table) add(cells ...string) { t.rows = append(t.rows, cells) }

func (t *table) String() string {
	var b strings.Builder
	b.WriteString("| " + strings.Join(t.head, " | ") + " |\n")
	b.WriteString("|" + strings.Repeat(" --- |", len(t.head)) + "\n")
	for _, r := range t.rows {
		b.WriteString("| " + strings.Join(r, " | ") + " |\n")
	}
	return b.String()
}

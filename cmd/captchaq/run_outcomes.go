package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/captchaq/captchaq/internal/quantile"
	"github.com/captchaq/captchaq/internal/text"
	"github.com/captchaq/captchaq/retry"
	"github.com/captchaq/captchaq/stream"
)

// outcomePrinter prints each outcome as it lands: JSON lines, or a table's
// rows on a terminal (above the progress bar).
type outcomePrinter struct {
	w       io.Writer
	json    bool
	bar     *progress
	headed  bool
	started time.Time
}

func newOutcomePrinter(w io.Writer, asJSON bool, bar *progress) *outcomePrinter {
	return &outcomePrinter{w: w, json: asJSON, bar: bar, started: time.Now()}
}

const outcomeRow = "%-24s %-8s %-14s %8s %8s  %s\n"

func (p *outcomePrinter) print(o stream.Outcome, err error) {
	if p.json {
		_ = json.NewEncoder(p.w).Encode(o)
		return
	}
	p.bar.clear()
	if !p.headed {
		fmt.Fprintf(p.w, outcomeRow, "ID", "STATUS", "METHOD", "ATTEMPTS", "SECONDS", "ANSWER / WHY")
		p.headed = true
	}
	status, why := string(o.Status), truncate(o.Text(), 40)
	switch {
	case errors.Is(err, stream.ErrTokenExpired):
		status, why = "expired", "solved, but the token expired before it was read"
	case err != nil:
		why = strings.TrimSpace(o.Reason + " " + o.Error + " " + o.Detail)
	}
	secs := ""
	if o.SolveSeconds > 0 {
		secs = fmt.Sprintf("%.1f", o.SolveSeconds)
	}
	fmt.Fprintf(p.w, outcomeRow, truncate(o.ID, 24), status, o.Method, fmt.Sprint(o.Attempts), secs, why)
}

// truncate fits s in a table cell of n bytes, "…" included (text.Cut).
func truncate(s string, n int) string { return text.Cut(s, n-1) }

// summary counts outcomes for the end-of-run report.
type summary struct {
	solved, expired, dead int
	reasons               map[string][]string // "reason code" → task ids
	times                 []float64
	elapsed               time.Duration
}

func (s *summary) add(o stream.Outcome, err error) {
	switch {
	case err == nil:
		s.solved++
		s.times = append(s.times, o.SolveSeconds)
	case errors.Is(err, stream.ErrTokenExpired):
		s.expired++
	default:
		s.dead++
		if s.reasons == nil {
			s.reasons = map[string][]string{}
		}
		k := o.Reason + " " + o.Error
		s.reasons[k] = append(s.reasons[k], o.ID)
	}
}

func (s *summary) done() int { return s.solved + s.expired + s.dead }

func (s *summary) print(w io.Writer, total int) {
	slices.Sort(s.times)
	fmt.Fprintf(w, "\ncaptchaq run: %d tasks in %s\n", total, s.elapsed.Round(100*time.Millisecond))
	fmt.Fprintf(w, "  solved   %d\n", s.solved)
	if s.expired > 0 {
		fmt.Fprintf(w, "  expired  %d (solved, but the token expired before it was read)\n", s.expired)
	}
	fmt.Fprintf(w, "  dead     %d\n", s.dead)
	keys := make([]string, 0, len(s.reasons))
	for k := range s.reasons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		ids := s.reasons[k]
		slices.Sort(ids)
		more := ""
		if len(ids) > 10 {
			ids, more = ids[:10], fmt.Sprintf(" and %d more (captchaq dead ls)", len(ids)-10)
		}
		fmt.Fprintf(w, "           %d × %s: %s%s\n", len(s.reasons[k]), strings.TrimSpace(k), strings.Join(ids, ", "), more)
	}
	if len(s.times) > 0 {
		fmt.Fprintf(w, "  solve time p50 %.1fs, p95 %.1fs\n", quantile.Of(s.times, 0.5), quantile.Of(s.times, 0.95))
	}
	if secs := s.elapsed.Seconds(); secs > 0 {
		fmt.Fprintf(w, "  throughput %.2f tasks/s (%.0f tasks/min)\n", float64(s.done())/secs, float64(s.done())/secs*60)
	}
}

// tryNext, when tasks went dead, names the commands that show a dead
// task's life and replay it: against the store run kept, or how to keep one.
func (s *summary) tryNext(w io.Writer, store, file string) {
	// An id that ran out of attempts first: a replay may well solve it.
	id := ""
	for k, ids := range s.reasons {
		first := slices.Min(ids)
		exhausted := strings.HasPrefix(k, string(retry.ReasonAttemptsExhausted)+" ")
		if id == "" || exhausted && !s.exhausted(id) || exhausted == s.exhausted(id) && first < id {
			id = first
		}
	}
	if id == "" {
		return
	}
	if store == "" {
		fmt.Fprintf(w, "  try      keep the store to look into the dead tasks: `captchaq run --store demo %s`, then\n"+
			"           `captchaq server --config '' --store demo &`, `captchaq trace %s`, `captchaq dead replay %s`\n", file, id, id)
		return
	}
	fmt.Fprintf(w, "  try      with `captchaq server --config '' --store %s` running: `captchaq trace %s` (its whole life), `captchaq dead replay %s` (queue it again: a worker solves it)\n",
		store, id, id)
}

// exhausted reports whether task id went dead for want of attempts.
func (s *summary) exhausted(id string) bool {
	for k, ids := range s.reasons {
		if strings.HasPrefix(k, string(retry.ReasonAttemptsExhausted)+" ") && slices.Contains(ids, id) {
			return true
		}
	}
	return false
}

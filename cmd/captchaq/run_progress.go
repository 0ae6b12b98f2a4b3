package main

import (
	"context"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/captchaq/captchaq/solver"
)

// progress draws a progress bar on a terminal, and nothing elsewhere. Its
// clock moves every second (tick), outcomes or not.
type progress struct {
	w     io.Writer
	total int
	on    bool
	start time.Time

	mu   sync.Mutex
	done int
}

func newProgress(w io.Writer) *progress {
	return &progress{w: w, on: isTerminal(w), start: time.Now()}
}

// begin draws the bar for total tasks.
func (p *progress) begin(total int) {
	p.mu.Lock()
	p.total = total
	p.mu.Unlock()
	p.update(0)
}

func (p *progress) update(done int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done = done
	p.draw()
}

// tick redraws the bar with the time elapsed.
func (p *progress) tick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw()
}

func (p *progress) draw() {
	if !p.on || p.total == 0 {
		return
	}
	const width = 40
	n := p.done * width / p.total
	fmt.Fprintf(p.w, "\r[%s%s] %d/%d  %s ", strings.Repeat("#", n), strings.Repeat(".", width-n), p.done, p.total,
		time.Since(p.start).Round(time.Second))
}

// clear erases the bar, so that a line can be printed where it was; the
// next update draws it again.
func (p *progress) clear() {
	if p.on {
		p.mu.Lock()
		fmt.Fprint(p.w, "\r\x1b[K")
		p.mu.Unlock()
	}
}

// say prints a line above the bar.
func (p *progress) say(line string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.on {
		fmt.Fprint(p.w, "\r\x1b[K")
	}
	fmt.Fprintln(p.w, line)
	p.draw()
}

func (p *progress) finish() {
	if p.on {
		fmt.Fprintln(p.w)
	}
}

// unreachableAfter is how long the solving service may fail to answer
// before run says so: long enough to pass over one refused connection,
// short enough that nobody watches a frozen screen wondering.
const unreachableAfter = 2 * time.Second

// watchService moves the bar's clock every second and says on the
// terminal, once per outage, when the solving service cannot be reached,
// and again when it answers. It returns when ctx ends.
func watchService(ctx context.Context, bar *progress, sc *solver.Client, url string) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	said := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		since, err := sc.Unreachable()
		switch {
		case err != nil && !said && time.Since(since) >= unreachableAfter:
			said = true
			bar.say(fmt.Sprintf("captchaq run: the solving service at %s cannot be reached (%v); the tasks wait without spending attempts until it answers",
				urlHost(url), err))
		case err == nil && said:
			said = false
			bar.say("captchaq run: the solving service answers again")
		default:
			bar.tick()
		}
	}
}

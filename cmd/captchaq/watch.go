package main

// The watchers of a waiting solve or submit --wait: what they say on the
// terminal while tasks wait for something that may never come.

import (
	"context"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/captchaq/captchaq/internal/dialect/classic"
	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream"
)

// watchTask says on w, once each, when a worker could not reach the solving
// service for task id or the service refused its key: the task then waits,
// and nobody should stare at a silent terminal until --timeout. It reads
// the task's event log every second until stop is closed or ctx ends.
func watchTask(ctx context.Context, stop <-chan struct{}, c *stream.Client, id string, w io.Writer) {
	said := map[string]bool{}
	everySecond(ctx, stop, func(tick int) bool {
		entries, err := c.Trace(ctx, id)
		if err != nil {
			return true
		}
		// No attempt after a few seconds and no worker alive: the task
		// waits for one that may never start.
		if tick >= 3 && !said["no-worker"] && !slices.ContainsFunc(entries, func(e stream.TraceEntry) bool { return e.Kind == "attempt" }) && noWorkerAlive(ctx, c) {
			said["no-worker"] = true
			fmt.Fprintf(w, "captchaq solve: no worker is alive (captchaq workers ls lists them); task %s waits in the queue until one starts\n", id)
		}
		if lookForPause(tick) && !said["paused"] && !slices.ContainsFunc(entries, func(e stream.TraceEntry) bool { return e.Kind == "attempt" }) {
			if t, err := c.TaskOf(ctx, id); err == nil && t.Status == stream.TaskQueued {
				if lanes := pausedLanes(ctx, c); lanes[t.Lane] {
					said["paused"] = true
					fmt.Fprintf(w, "captchaq solve: %s; task %s waits in it\n", pausedSay(t.Lane), id)
				}
			}
		}
		for _, e := range entries {
			var line string
			switch e.Code {
			case solver.CodeUnreachable:
				line = fmt.Sprintf("captchaq solve: worker %s cannot reach the solving service (its log says where); task %s waits without spending attempts", e.Worker, id)
			case classic.CodeWrongUserKey, classic.CodeKeyDoesNotExist:
				line = fmt.Sprintf("captchaq solve: the solving service refuses the API key of worker %s (%s); task %s waits for a worker that can solve it", e.Worker, e.Code, id)
			}
			if line != "" && !said[e.Code+e.Worker] {
				said[e.Code+e.Worker] = true
				fmt.Fprintln(w, line)
			}
		}
		return true
	})
}

// noWorkerAlive reports whether the server knows workers and none of them
// is alive (none at all counts); false when it cannot say.
func noWorkerAlive(ctx context.Context, c *stream.Client) bool {
	ws, err := c.Workers(ctx)
	return err == nil && !slices.ContainsFunc(ws, func(w stream.WorkerInfo) bool { return !w.Stopped })
}

// watchWorkers says on w, once each, when command (submit --wait, dead
// replay --wait) has waited a few seconds for outcomes and no worker is
// alive to solve them (the README's walkthrough typed by hand, with the
// emulator's port taken, leaves the worker exited), or a lane is paused:
// the wait goes on, as the tasks stay queued, but not in silence.
func watchWorkers(ctx context.Context, stop <-chan struct{}, c *stream.Client, w io.Writer, command string) {
	saidNoWorker, saidPaused := false, map[stream.Lane]bool{}
	everySecond(ctx, stop, func(tick int) bool {
		if tick < 3 {
			return true
		}
		if !saidNoWorker && noWorkerAlive(ctx, c) {
			saidNoWorker = true
			fmt.Fprintf(w, "captchaq %s: no worker is alive (captchaq workers ls lists them); the tasks without an outcome wait in the queue until one starts\n", command)
		}
		if !lookForPause(tick) {
			return true
		}
		paused := pausedLanes(ctx, c)
		for _, lane := range []stream.Lane{stream.LaneFast, stream.LaneSlow} {
			if !saidPaused[lane] && paused[lane] {
				saidPaused[lane] = true
				fmt.Fprintf(w, "captchaq %s: %s; the tasks without an outcome that wait in it stay there\n", command, pausedSay(lane))
			}
		}
		return true
	})
}

// pausedLanes are the lanes paused now (lane pause) that hold waiting
// tasks; none when the stats cannot say.
func pausedLanes(ctx context.Context, c *stream.Client) map[stream.Lane]bool {
	st, err := c.Stats(ctx, time.Second)
	if err != nil {
		return nil
	}
	paused := map[stream.Lane]bool{}
	for _, q := range st.Queues {
		if q.Paused && q.Queued+uint64(q.InFlight) > 0 {
			paused[q.Lane] = true
		}
	}
	return paused
}

// lookForPause says at which seconds of a wait the watchers read whether a
// lane is paused: the stats it takes read the stream, so not every second.
func lookForPause(tick int) bool { return tick == 3 || tick%30 == 0 }

// pausedSay says that lane is paused and how to resume it.
func pausedSay(lane stream.Lane) string {
	return fmt.Sprintf("lane %s is paused: workers take none of its tasks until `captchaq lane resume %s`", lane, lane)
}

// everySecond calls look once a second, with the count of seconds so far
// (from 1), until it returns false, stop is closed or ctx ends.
func everySecond(ctx context.Context, stop <-chan struct{}, look func(tick int) bool) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for tick := 1; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-stop:
			return
		case <-t.C:
		}
		if !look(tick) {
			return
		}
	}
}

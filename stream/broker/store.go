package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/nats-io/nats-server/v2/server"
)

// A JetStream file store fails in two ways when its disk fills:
//
//   - JetStream's storage limit (max_file_store; by default 75 % of the disk
//     space free when the server started) is reached: every write to every
//     stream is refused ("insufficient resources") until streams shrink. The
//     limit is fixed at start: freeing disk space later does not raise it.
//   - The disk itself runs out (another file filled it): the write fails with
//     ENOSPC and nats-server latches the stream (a "critical write error"):
//     it refuses every later write, and answers none of them, even once
//     space returns, until its store is opened again. Nothing in
//     nats-server v2.15.3 clears the latch but closing the store: a server
//     restart, or JetStream shut down and enabled again in the same process.
//
// A Guard measures both every interval, says so at ERROR when the store
// refuses writes, and, when a stream is latched and space is back, shuts
// JetStream down and enables it again, which reopens every stream from its
// files: the latch is gone and the dynamic limit is measured again. Clients
// read the measurement (Status) to keep room for the records of the tasks
// already accepted (package stream/internal/room).

// StoreState is a Guard's measurement of the store.
type StoreState struct {
	At       time.Time
	Dir      string
	MaxStore int64 // JetStream's server-wide storage limit
	Used     int64 // what JetStream's streams hold
	Free     int64 // free space on the store's filesystem (for unprivileged users)
	// Room is how much more streams may store: the least of the server's
	// limit, every account's limit and the free space less Margin.
	Room int64
	// Refusing says the store refuses writes; Error says why, Action what
	// the operator must do (empty when the Guard recovers by itself).
	Refusing bool
	Error    string
	Action   string
}

// GuardConfig configures a Guard. The zero value checks every second with
// a margin of MinMargin.
type GuardConfig struct {
	// Every is how often the store is measured. Default 1s.
	Every time.Duration
	// Margin is the free disk space kept for JetStream's own files (indexes,
	// consumer state, metadata), outside any stream's bytes. Default: 2 %
	// of the filesystem, at least MinMargin.
	Margin int64
	// Logger receives the store's state changes. Default: none.
	Logger *slog.Logger
	// Reopening, when set, is called before JetStream is shut down to
	// reopen the store, and Reopened after it was enabled again: memory-
	// backed streams (and what they held) are gone then, as after a
	// restart, and need creating again.
	Reopening func()
	Reopened  func() error
}

// MinMargin is the least free disk space a Guard keeps out of the room.
const MinMargin = 2 << 20

// Guard watches a server's JetStream store; see the comment above StoreState.
type Guard struct {
	ns    *server.Server
	cfg   GuardConfig
	log   *slog.Logger
	mu    sync.Mutex
	state StoreState // the loop's last measurement
	fresh StoreState // Status's last measurement
	// latched is set while a stream is latched by a write error; failed
	// while a reopening failed and is to be tried again (every raiseEvery),
	// final when it cannot be tried again (a clustered server: the
	// operator restarts).
	latched, failed, final bool
	// raised is when the Guard last reopened the store (check's goroutine
	// only), and jsCfg the JetStream configuration it reopened: what
	// enables JetStream again after a reopening that shut it down and
	// could not enable it.
	raised time.Time
	jsCfg  *server.JetStreamConfig
	// restore is set while the Reopened callback failed after JetStream
	// came back: it is called again (every raiseEvery) until it succeeds.
	restore bool
	stop    context.CancelFunc
	done    chan struct{}
}

// WatchStore starts a Guard on ns's JetStream store; it runs until Stop or
// the server shuts down. Its first measurement is taken before it returns.
func WatchStore(ns *server.Server, cfg GuardConfig) *Guard {
	if cfg.Every <= 0 {
		cfg.Every = time.Second
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ctx, cancel := context.WithCancel(context.Background())
	g := &Guard{ns: ns, cfg: cfg, log: log, stop: cancel, done: make(chan struct{})}
	g.check()
	go g.run(ctx)
	return g
}

// Stop stops the Guard and waits for it.
func (g *Guard) Stop() {
	g.stop()
	<-g.done
}

// Status measures the store now: clients decide on it whether a
// submission fits, so a reading as old as the Guard's interval would let
// a fast producer past the room.
func (g *Guard) Status() StoreState {
	g.mu.Lock()
	if last := g.fresh; !last.At.IsZero() && time.Since(last.At) < statusReuse {
		g.mu.Unlock()
		return last
	}
	g.mu.Unlock()
	st := g.measure()
	g.mu.Lock()
	g.fresh = st
	g.mu.Unlock()
	return st
}

// statusReuse is how long Status answers with its last measurement: many
// producers asking at once cost one measurement, and the room they see is
// at most this old (a fast producer is then held by the margin).
const statusReuse = 20 * time.Millisecond

func (g *Guard) run(ctx context.Context) {
	defer close(g.done)
	t := time.NewTicker(g.cfg.Every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			if !g.ns.Running() {
				return
			}
			g.check()
		}
	}
}

// check measures the store, says what changed, and recovers a latched store
// once there is space again.
func (g *Guard) check() {
	st := g.measure()
	g.mu.Lock()
	was, latched, failed := g.state, g.latched, g.failed
	g.state = st
	g.mu.Unlock()
	switch {
	case st.Refusing && !was.Refusing:
		g.log.Error("the JetStream store refuses writes: no task can be submitted, and no worker can record an attempt or an outcome",
			slog.String("error", st.Error), slog.String("store", st.Dir), slog.Int64("free_bytes", st.Free),
			slog.Int64("max_store", st.MaxStore), slog.Int64("used", st.Used), slog.String("action", st.actionOrRecover()))
	case !st.Refusing && was.Refusing:
		g.log.Info("the JetStream store takes writes again", slog.String("store", st.Dir), slog.Int64("room_bytes", st.Room))
	}
	g.mu.Lock()
	final, restore := g.final, g.restore
	g.mu.Unlock()
	due := time.Since(g.raised) > raiseEvery
	switch {
	case final:
	case restore && due:
		g.raised = time.Now()
		g.afterReopen()
	case failed && g.jsCfg != nil && g.ns.JetStreamConfig() == nil && due:
		g.raised = time.Now()
		g.log.Warn("JetStream is down after a reopening of its store failed: enabling it again", slog.String("store", g.jsCfg.StoreDir))
		g.reopen(g.raiseTo(st))
	case latched && st.Free > g.margin(st.Dir) && (!failed || due):
		g.log.Warn("the disk has space again: reopening the JetStream store to clear its write error", slog.String("store", st.Dir))
		g.reopen(0)
	case g.limitRaisable(st) && due:
		g.raised = time.Now()
		limit := g.raiseTo(st)
		g.log.Warn("JetStream's storage limit, measured from the free disk space, is full while the disk has space: reopening the JetStream store with a limit that leaves room",
			slog.String("store", st.Dir), slog.Int64("max_store", st.MaxStore), slog.Int64("used", st.Used), slog.Int64("free_bytes", st.Free),
			slog.Int64("new_max_store", limit))
		g.reopen(limit)
	}
}

// fullBelow is how little room JetStream's storage limit may leave before
// the Guard calls it full: less than what the records of a few tasks take.
const fullBelow = 64 << 10

// raiseEvery bounds how often the store is reopened to measure its limit
// again, should nats-server's measurement differ from the Guard's.
const raiseEvery = 10 * time.Second

// limitRaisable reports whether JetStream's storage limit, measured from
// the free disk space (no max_file_store), is full (leaves less than
// fullBelow) while the disk has room beyond the margin: the limit was
// measured while the disk was full or nearly so (a reopening while another
// file filled it, or after only part of the space came back), or at a
// start on a disk the streams already fill to more than three quarters (a
// server killed while it reopened its store comes back so), and
// nats-server never measures it again by itself. Without this, the
// accepted tasks could never record their ends: no write is taken, and
// no stream shrinks.
func (g *Guard) limitRaisable(st StoreState) bool {
	if st.Dir == "" || st.MaxStore-st.Used >= fullBelow || !g.dynamicLimit() {
		return false
	}
	return g.raiseTo(st)-st.Used >= fullBelow
}

// raiseTo is the storage limit a reopening sets when the one measured from
// the free disk space is full: the most of nats-server's own measurement
// (75 % of the free space plus 75 % of what the streams hold) and of what
// the disk can hold with the margin kept (what the streams hold and the
// free space less the margin). nats-server's measurement alone leaves
// nothing once the streams hold more than three times the free space,
// which a store filled to its limit and then reopened does: the margin,
// which the room producers keep is measured within, is what protects the
// disk then. 0 when the limit is configured (max_file_store): it is kept.
func (g *Guard) raiseTo(st StoreState) int64 {
	if !g.dynamicLimit() {
		return 0
	}
	again := (st.Free / 4 * 3) + (st.Used / 4 * 3)
	return max(again, st.Used+st.Free-g.margin(st.Dir))
}

// actionOrRecover is what the log says the operator should do.
func (st StoreState) actionOrRecover() string {
	if st.Action != "" {
		return st.Action
	}
	return "free space on the store's disk: the server resumes by itself once there is some"
}

// reopen shuts JetStream down and enables it again with the configuration
// it ran with, so that every stream is opened again from its files without
// the write error it latched; with limit > 0, with that storage limit,
// else (a limit measured from the free space) measured again. Clients see
// JetStream unavailable for the moment it takes; consumers and their state
// are on disk and come back. A JetStream that a failed reopening left shut
// down is only enabled again.
func (g *Guard) reopen(limit int64) {
	cfg := g.ns.JetStreamConfig()
	if cfg == nil {
		if cfg = g.jsCfg; cfg == nil {
			return
		}
	} else {
		if g.ns.JetStreamIsClustered() {
			// Shutting JetStream down on one server of a cluster moves its
			// streams' leaders elsewhere and back: a restart says so plainly.
			g.fail(errors.New("a clustered server's store is not reopened in place"), true)
			return
		}
		kept := *cfg
		g.jsCfg = &kept
		if g.cfg.Reopening != nil {
			g.cfg.Reopening()
		}
		if err := g.ns.ShutdownJetStream(); err != nil {
			g.fail(fmt.Errorf("shut JetStream down: %w", err), false)
			return
		}
	}
	// EnableJetStream adds the "jetstream" directory to the one it is
	// given, and measures the free space again when no limit was set.
	again := *cfg
	again.StoreDir = filepath.Dir(cfg.StoreDir)
	if g.dynamicLimit() {
		again.MaxStore = max(limit, 0)
	}
	if err := g.ns.EnableJetStream(&again); err != nil {
		g.fail(fmt.Errorf("enable JetStream again: %w", err), false)
		return
	}
	g.mu.Lock()
	g.latched, g.failed = false, false
	g.state.Action = ""
	g.mu.Unlock()
	g.afterReopen()
}

// afterReopen calls the Reopened callback, and measures the store again;
// a callback that fails is called again at the next try.
func (g *Guard) afterReopen() {
	if g.cfg.Reopened != nil {
		if err := g.cfg.Reopened(); err != nil {
			g.mu.Lock()
			g.restore = true
			g.mu.Unlock()
			g.fail(fmt.Errorf("after reopening JetStream: %w", err), false)
			return
		}
	}
	g.mu.Lock()
	g.restore, g.failed = false, false
	g.mu.Unlock()
	g.check()
}

// fail says that the store could not be reopened and what to do: nothing
// but wait while the Guard tries again (every raiseEvery), or, when final,
// restart the server.
func (g *Guard) fail(err error, final bool) {
	action := fmt.Sprintf("free space on the store's disk: the server tries again every %s (its JetStream store could not be reopened: %v)", raiseEvery, err)
	if final {
		action = "restart captchaq server (its JetStream store could not be reopened: " + err.Error() + ")"
		g.log.Error("could not reopen the JetStream store after its write error: restart captchaq server", slog.Any("error", err))
	} else {
		g.log.Error("could not reopen the JetStream store: trying again", slog.Duration("every", raiseEvery), slog.Any("error", err))
	}
	g.raised = time.Now() // the next try after raiseEvery
	g.mu.Lock()
	g.failed, g.final = true, g.final || final
	g.state.Action = action
	g.mu.Unlock()
}

// dynamicLimit reports whether JetStream's storage limit was measured from
// the free disk space rather than configured (max_file_store).
func (g *Guard) dynamicLimit() bool {
	v, ok := maxStoreSet.Load(g.ns)
	return !ok || v.(int64) <= 0
}

// maxStoreSet holds the max_file_store each server Start started was
// configured with: JetStream's running configuration does not say whether
// its limit was set or measured.
var maxStoreSet sync.Map // *server.Server → int64

// margin is the free space kept for JetStream's own files.
func (g *Guard) margin(dir string) int64 {
	if g.cfg.Margin > 0 {
		return g.cfg.Margin
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		return MinMargin
	}
	return max(int64(fs.Blocks)*int64(fs.Bsize)/50, MinMargin)
}

// measure reads the store's state from the server and the filesystem.
func (g *Guard) measure() StoreState {
	st := StoreState{At: time.Now()}
	cfg := g.ns.JetStreamConfig()
	if cfg == nil {
		st.Refusing, st.Error = true, "JetStream is not running"
		g.mu.Lock()
		if g.state.Action != "" {
			st.Action = g.state.Action
		}
		g.mu.Unlock()
		return st
	}
	st.Dir, st.MaxStore = cfg.StoreDir, cfg.MaxStore
	var fs syscall.Statfs_t
	if err := syscall.Statfs(cfg.StoreDir, &fs); err == nil {
		st.Free = int64(fs.Bavail) * int64(fs.Bsize)
	}
	info, err := g.ns.Jsz(&server.JSzOptions{Accounts: true})
	if err == nil {
		st.Used = int64(info.Store)
	}
	st.Room = max(min(st.MaxStore-st.Used, st.Free-g.margin(cfg.StoreDir)), 0)
	if err == nil {
		for _, acc := range info.AccountDetails {
			if a, err := g.ns.LookupAccount(acc.Id); err == nil {
				u := a.JetStreamUsage()
				if u.Limits.MaxStore > 0 {
					st.Room = max(min(st.Room, u.Limits.MaxStore-int64(u.Store)), 0)
				}
			}
		}
	}
	var why []string
	action := ""
	if st.Used > st.MaxStore {
		why = append(why, fmt.Sprintf("JetStream's storage limit is exceeded (%d of %d bytes): it refuses every write until streams shrink", st.Used, st.MaxStore))
		switch {
		case g.limitRaisable(st):
			// The server reopens the store with room by itself (check).
		case g.dynamicLimit():
			action = "free space on the store's disk: the server raises JetStream's storage limit by itself once the disk has room"
		default:
			action = "wait for the streams to shrink (expired records), or raise max_file_store in the server's config and restart it"
		}
	}
	h := g.ns.Healthz(&server.HealthzOptions{Details: true})
	latched := false
	for _, e := range h.Errors {
		if strings.Contains(e.Error, "write error") {
			latched = true
			why = append(why, e.Error)
		}
	}
	g.mu.Lock()
	if latched {
		g.latched = true
	}
	if g.state.Action != "" && g.state.Refusing {
		st.Action = g.state.Action
	}
	g.mu.Unlock()
	if len(why) > 0 {
		st.Refusing, st.Error = true, strings.Join(why, "; ")
		if st.Action == "" {
			st.Action = action
		}
	}
	return st
}

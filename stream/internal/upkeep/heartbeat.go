package upkeep

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/stream/internal/jscall"
	"github.com/captchaq/captchaq/stream/wire"
)

// Heartbeat stores the worker's heartbeat (wire.WorkerInfo) at Start and
// every wire.HeartbeatEvery until it stops, then a last one that says it
// stopped, for `captchaq workers ls`. Heartbeats are best effort: a failed
// one is tried again at the next beat, and never holds up the worker. Each
// stored heartbeat also reads the broker's clock (Clock).
type Heartbeat struct {
	// Info is the worker's heartbeat with what does not change: its name,
	// host, pid, threads and start.
	Info wire.WorkerInfo
	// Now is the worker's clock.
	Now func() time.Time
	// InUse counts the worker's busy threads; Held lists the task
	// generations it holds (executor.Held).
	InUse func() int
	Held  func() []wire.HeldTask
	// Service is the worker's client of the solving service, whose outage
	// and captchas held the heartbeat carries; nil: none to report.
	Service ServiceState
	// JS publishes on the stream, Stream reads the heartbeat back for the
	// broker's time of it.
	JS     jetstream.JetStream
	Stream jetstream.Stream
	// Reach hears whether the stream answers; Clock is set from each
	// heartbeat's stored time.
	Reach *jscall.Reach
	Clock *jscall.BrokerClock
	Log   *slog.Logger
	// MaxMessage is the largest heartbeat message, in bytes of JSON, the
	// stream takes (HeartbeatMessageMax); zero: no limit. A list of held
	// tasks that does not fit is split (wire.WorkerInfo.HeldParts).
	MaxMessage int

	r runner
	// uncarried is set once the worker said a heartbeat could not carry
	// what it holds: it says so once.
	uncarried bool
}

// HeartbeatMessageMax is the largest heartbeat message a worker stores
// on a server of max_payload maxPayload whose stream takes messages of
// maxMsgSize at most (zero or less: no limit of its own): room is left
// for the message's headers (Nats-TTL, 27 bytes with the status line:
// 256 is ample, and leaves a server of max_payload 2 KiB, whose stream
// takes 1 KiB, room for a list), and no message passes 64 KiB, so that the
// readers of every worker's last heartbeat (`captchaq workers ls`, stats,
// the dashboard) read little however much a worker holds.
func HeartbeatMessageMax(maxPayload int64, maxMsgSize int32) int {
	const ceiling, headers = 64 << 10, 256
	m := int64(ceiling + headers)
	if maxPayload > 0 {
		m = min(m, maxPayload)
	}
	if maxMsgSize > 0 {
		m = min(m, int64(maxMsgSize))
	}
	return int(max(m-headers, 1))
}

// ServiceState is what a heartbeat says of the solving service
// (solver.Client).
type ServiceState interface {
	Held() int
	Unreachable() (time.Time, error)
}

// lastBeatTimeout bounds the heartbeat that says a worker stopped: with the
// broker gone it is not stored, and the stop must not wait for it.
const lastBeatTimeout = time.Second

// Start stores the first heartbeat, before any task (it reads the broker's
// clock), and beats until ctx ends or Stop.
func (h *Heartbeat) Start(ctx context.Context) error {
	info := h.Info
	h.beat(ctx, &info)
	h.r.run(ctx, func(ctx context.Context) {
		t := time.NewTicker(wire.HeartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				info.Stopped = true
				sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), lastBeatTimeout)
				h.beat(sctx, &info)
				cancel()
				return
			case <-t.C:
				h.beat(ctx, &info)
			}
		}
	})
	return nil
}

// Stop stores the last heartbeat (waiting for it at most a second) and
// returns.
func (h *Heartbeat) Stop() { h.r.stop() }

// beat stores one heartbeat of info, brought up to now: its parts first
// when the tasks it holds do not fit in one message (SplitHeld), then the
// message that names them.
func (h *Heartbeat) beat(ctx context.Context, info *wire.WorkerInfo) {
	held := h.Held()
	info.At, info.InUse = h.Now(), h.InUse()
	info.Tasks, info.Held, info.HeldParts, info.Part = nil, len(held), nil, false
	info.ServiceDownSince, info.ServiceDown, info.HeldAtService = time.Time{}, "", 0
	if sc := h.Service; sc != nil {
		info.HeldAtService = sc.Held()
		if since, err := sc.Unreachable(); err != nil {
			info.ServiceDownSince, info.ServiceDown = since, err.Error()
		}
	}
	bctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	parts, carried := SplitHeld(*info, held, h.MaxMessage)
	if carried < len(held) && !h.uncarried {
		h.uncarried = true
		h.Log.Error("the heartbeat cannot name every task this worker holds: another worker given a task whose attempt this worker recorded again (a broker that lost its delivery state) waits for this worker while it lives, whether it holds the task or not; said once",
			slog.Int("held", len(held)), slog.Int("named", carried), slog.Int("max_message_bytes", h.MaxMessage))
	}
	if len(parts) == 1 {
		info.Tasks = parts[0]
	} else {
		// Each part is a copy of the heartbeat as SplitHeld measured it,
		// without the sequences of the parts stored before it.
		base := *info
		for _, p := range parts {
			part := base
			part.Tasks, part.Part = p, true
			ack, err := h.store(ctx, bctx, part)
			if err != nil {
				return
			}
			info.HeldParts = append(info.HeldParts, ack.Sequence)
		}
		if len(info.HeldParts) > 0 {
			info.Tasks, info.Held = h.heldSince(*info, held)
		}
	}
	sent := h.Now()
	ack, err := h.store(ctx, bctx, *info)
	if err != nil {
		return
	}
	acked := h.Now()
	if m, err := h.Stream.GetMsg(bctx, ack.Sequence); err == nil {
		h.Clock.Set(jscall.ClockOffset(m.Time, sent, acked))
	}
}

// heldSince returns the tasks held now that held, the list of a split
// heartbeat's parts, does not name, as many as its last message info has
// room for, and how many tasks are held in all. A reader takes a split
// heartbeat as old as its first part, stored after held was read: an
// attempt recorded meanwhile is named here. Those with no room are
// counted only (a reader then waits for any task not named).
func (h *Heartbeat) heldSince(info wire.WorkerInfo, held []wire.HeldTask) ([]wire.HeldTask, int) {
	in := make(map[wire.HeldTask]bool, len(held))
	for _, t := range held {
		in[t] = true
	}
	var late []wire.HeldTask
	for _, t := range h.Held() {
		if !in[t] {
			late = append(late, t)
		}
	}
	info.Held = len(held) + len(late)
	size := func(v any) int { b, _ := json.Marshal(v); return len(b) }
	used := size(info) + len(`,"tasks":[]`)
	for i, t := range late {
		if used += size(t) + 1; h.MaxMessage > 0 && used > h.MaxMessage {
			return late[:i], info.Held
		}
	}
	return late, info.Held
}

// store stores one message of a heartbeat, under bctx; ctx is the
// heartbeat's own, whose end is no failure. A message refused as too large
// (a server whose max_payload is smaller than the worker was told) is said
// once: the stream answered, and is not out of reach.
func (h *Heartbeat) store(ctx, bctx context.Context, info wire.WorkerInfo) (*jetstream.PubAck, error) {
	b, err := json.Marshal(info)
	if err != nil {
		return nil, err
	}
	msg := nats.NewMsg(wire.HeartbeatSubject(info.Name))
	msg.Data = b
	ack, err := h.JS.PublishMsg(bctx, msg, jetstream.WithMsgTTL(wire.HeartbeatTTL))
	switch {
	case err == nil:
		h.Reach.Answered(h.Log)
		return ack, nil
	case ctx.Err() != nil:
	case errors.Is(err, nats.ErrMaxPayload) || errors.Is(err, jetstream.ErrStreamMessageExceedsMaximum):
		if !h.uncarried {
			h.uncarried = true
			h.Log.Error("a heartbeat message was refused as too large: this worker is not seen alive while it holds this many tasks, and another worker given one of them again takes it over; said once",
				slog.Int("bytes", len(b)), slog.Int("held", info.Held), slog.Int("max_message_bytes", h.MaxMessage), slog.Any("error", err))
		}
	default:
		h.Log.Debug("heartbeat not stored", slog.Any("error", err))
		h.Reach.Failed(h.Log, "store a heartbeat", err)
	}
	return nil, err
}

// SplitHeld splits the held tasks of a heartbeat info (whose Tasks,
// HeldParts and Part are unset) into the lists of its messages, none of
// whose JSON passes max bytes (max <= 0: no limit): one list when they fit
// in one message with info, else the lists of its parts, the message that
// names them carrying none. It returns how many of the tasks the lists
// carry: fewer than all only when a message cannot hold even one of them,
// or the parts are too many for the last message to name.
func SplitHeld(info wire.WorkerInfo, held []wire.HeldTask, max int) (lists [][]wire.HeldTask, carried int) {
	size := func(v any) int { b, _ := json.Marshal(v); return len(b) }
	base := size(info)
	// ,"tasks":[…] and the commas between tasks (one fewer than tasks).
	listRoom := len(`,"tasks":[]`)
	total := base + listRoom - 1
	for _, t := range held {
		total += size(t) + 1
	}
	if max <= 0 || len(held) == 0 || total <= max {
		return [][]wire.HeldTask{held}, len(held)
	}
	part := info
	part.Part = true
	room := max - size(part) - listRoom
	// The last message names each part by its sequence (20 digits at
	// most, and a comma).
	nameRoom := max - base - len(`,"held_parts":[]`)
	var cur []wire.HeldTask
	used := 0
	for _, t := range held {
		n := size(t) + 1
		if n > room {
			break // no message holds it
		}
		if used+n > room {
			if (len(lists)+2)*21 > nameRoom {
				cur = nil
				break
			}
			lists = append(lists, cur)
			cur, used = nil, 0
		}
		cur = append(cur, t)
		used += n
	}
	if len(cur) > 0 {
		lists = append(lists, cur)
	}
	for _, l := range lists {
		carried += len(l)
	}
	return lists, carried
}

// Whether a delivery's last attempt may still be running at its worker: read
// from the worker's heartbeat, since redelivery alone proves nothing.

package executor

import (
	"context"
	"encoding/json"
	"log/slog"
	"slices"

	"github.com/captchaq/captchaq/stream/wire"
)

// attemptLives reports whether the generation's last attempt, recorded and
// not ended, may still be running at its worker: this worker holds it, or
// the worker's latest heartbeat is newer than the attempt's record and
// names the task, or is older (it may not know the task yet: the next one
// says). Not when that worker's heartbeat has expired (HeartbeatTTL, on the
// broker's clock), says it stopped, or, newer than the attempt, does not
// name the task. Redelivery alone proves nothing: a broker that restarts
// may lose its consumers' delivery state and deliver a task again while
// its worker is still solving it. A heartbeat that cannot be read counts
// as alive: waiting costs a heartbeat period, a wrong guess a second
// payment.
func (d *delivery) attemptLives(ctx context.Context) bool {
	holder := d.st.Last.Worker
	if holder == d.x.Name {
		return d.x.Held.Has(wire.HeldTask{ID: d.id, Gen: d.gen})
	}
	var (
		hb    []byte
		hbSeq uint64
		found bool
	)
	err := d.patiently(ctx, func() (err error) {
		hb, hbSeq, found, err = d.x.Store.Heartbeat(ctx, holder)
		return err
	})
	switch {
	case err != nil:
		d.log.Warn("cannot read the heartbeat of the last attempt's worker; waiting", slog.Any("error", err))
		return true
	case !found && !d.x.Reach.Settled(2*wire.HeartbeatEvery):
		// The stream was out of this worker's reach (a leaf link cut, a
		// broker down) until a moment ago: the holder's heartbeats expired
		// meanwhile at the stream whether it lives or not, and a live one
		// stores its next within wire.HeartbeatEvery of the return.
		d.log.Info("the last attempt's worker has no heartbeat since the stream came back; waiting for its next", slog.String("holder", holder))
		return true
	case !found:
		return false
	}
	var info wire.WorkerInfo
	if json.Unmarshal(hb, &info) != nil {
		return false
	}
	return heartbeatHolds(info, hbSeq, d.st.LastSeq, wire.HeldTask{ID: d.id, Gen: d.gen}, func(seq uint64) (wire.WorkerInfo, bool) {
		var part wire.WorkerInfo
		var data []byte
		err := d.patiently(ctx, func() (err error) {
			data, found, err = d.x.Store.HeartbeatPart(ctx, holder, seq)
			return err
		})
		if err != nil || !found || json.Unmarshal(data, &part) != nil {
			d.log.Info("cannot read a part of the heartbeat of the last attempt's worker; waiting", slog.Uint64("part_seq", seq), slog.Any("error", err))
			return part, false
		}
		return part, true
	})
}

// heartbeatHolds decides from a worker's latest heartbeat (stored at
// sequence seq) whether the attempt recorded at attemptSeq may still be
// running there. A split heartbeat's parts are read with part, and looked
// at until one names the task; one that cannot be read (ok false) counts
// as naming it, as a heartbeat being stored does (its last message, which
// names its parts, is still to come). A split heartbeat's list is what the
// worker held before its first part was stored: it is as old as that part
// (an attempt recorded while the parts were stored is in none of them). A
// heartbeat that counts more tasks held than its lists name (one that
// could not carry them all) may hold any it does not name.
func heartbeatHolds(info wire.WorkerInfo, seq, attemptSeq uint64, t wire.HeldTask, part func(seq uint64) (wire.WorkerInfo, bool)) bool {
	if len(info.HeldParts) > 0 {
		seq = min(seq, slices.Min(info.HeldParts))
	}
	switch {
	case info.Stopped:
		return false
	case seq < attemptSeq, info.Part, slices.Contains(info.Tasks, t):
		return true
	}
	named := len(info.Tasks)
	for _, ps := range info.HeldParts {
		p, ok := part(ps)
		if !ok || slices.Contains(p.Tasks, t) {
			return true
		}
		named += len(p.Tasks)
	}
	return info.Held > named
}

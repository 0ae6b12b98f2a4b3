package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/captchaq/captchaq/internal/storestatus"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/broker"
	"github.com/captchaq/captchaq/stream/wire"
)

// guardStore watches the embedded server's JetStream store (broker.Guard:
// says at ERROR when it refuses writes, recovers it when space returns) and
// answers clients' requests for its state on stream.SubjectStoreStatus
// through nc, a connection to ns. After it reopened the store, reopened
// creates again what lived in memory. The returned function stops both.
func guardStore(ns *server.Server, nc *nats.Conn, top stream.Topology, log *slog.Logger, reopened func() error) (func(), error) {
	js, err := jetstream.New(nc)
	if err != nil {
		return nil, err
	}
	tokens := &heldTokens{js: js, name: top.TokenStream(), log: log}
	return storestatus.Serve(ns, nc, broker.GuardConfig{Logger: log, Reopening: tokens.save, Reopened: func() error {
		if err := reopened(); err != nil {
			return err
		}
		return tokens.restore()
	}})
}

// printStore prints the broker's store line of `captchaq stats`.
func printStore(w io.Writer, st *stream.StoreStatus) {
	if st == nil {
		return
	}
	if st.Refusing {
		action := st.Action
		if action == "" {
			action = "free space on its disk: the server resumes by itself"
		}
		fmt.Fprintf(w, "STORE REFUSES WRITES (%s): %s; %s\n", st.Dir, st.Error, action)
		return
	}
	fmt.Fprintf(w, "store: room for %s more (%s free on disk, JetStream %s of %s used) in %s\n",
		mib(st.Room), mib(st.Free), mib(st.Used), mib(st.MaxStore), st.Dir)
}

// mib prints a size in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// heldTokens carries the messages of the memory-backed token stream over a
// reopening of the store (broker.Guard), which, like a restart, empties
// memory streams: solved tokens not read yet would be lost.
type heldTokens struct {
	js   jetstream.JetStream
	name string
	log  *slog.Logger
	msgs []*jetstream.RawStreamMsg
}

// save reads every token the stream holds.
func (h *heldTokens) save() {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h.msgs = nil
	s, err := h.js.Stream(ctx, h.name)
	if err != nil {
		h.log.Warn("could not read the tokens to keep them over the store's reopening: tokens not read yet are lost", slog.Any("error", err))
		return
	}
	info := s.CachedInfo()
	for seq := info.State.FirstSeq; seq > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		if err != nil {
			h.log.Warn("could not read the tokens to keep them over the store's reopening: tokens not read yet are lost", slog.Any("error", err))
			return
		}
		h.msgs = append(h.msgs, m)
	}
}

// restore stores again every saved token that has not expired, with what
// is left of its lifetime, each at its sequence in the stream before the
// reopening: its outcome names it by that number (wire.HeaderTokenSeq,
// taskstore.ReadTokenAt), and the stream, created again, would number them
// from 1, so a token after one removed (read and erased, or expired) would
// be read as lost.
func (h *heldTokens) restore() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	s, err := h.js.Stream(ctx, h.name)
	if err != nil {
		return fmt.Errorf("store the tokens again: %w", err)
	}
	now := time.Now()
	gaps := false
	for _, m := range h.msgs {
		hdr := nats.Header{}
		for k, v := range m.Header {
			if !strings.HasPrefix(k, "Nats-Expected-") {
				hdr[k] = v
			}
		}
		if v := hdr.Get(jetstream.MsgTTLHeader); v != "" {
			ttl, err := time.ParseDuration(v)
			if err != nil {
				continue
			}
			left := m.Time.Add(ttl).Sub(now)
			if left <= 0 {
				continue // expired meanwhile
			}
			hdr.Set(jetstream.MsgTTLHeader, (left + time.Second - 1).Truncate(time.Second).String())
		}
		filled, err := h.putAt(ctx, s, m.Sequence, &nats.Msg{Subject: m.Subject, Header: hdr, Data: m.Data})
		gaps = gaps || filled
		if err != nil {
			return fmt.Errorf("store the tokens again: %w", err)
		}
	}
	if gaps {
		if err := s.Purge(ctx, jetstream.WithPurgeSubject(tokenGapSubject)); err != nil {
			return fmt.Errorf("store the tokens again: remove the gaps' fillers: %w", err)
		}
	}
	h.msgs = nil
	return nil
}

// tokenGapSubject is where restore publishes the fillers that bring the
// token stream's next sequence up to a restored token's; they are purged
// once the tokens are back. Its generation is not a number, so it is never
// a token's subject (wire.TokenSubject), and a reader that reaches one
// finds no token.
const tokenGapSubject = wire.SubjectTokens + ".restore.gap"

// putAt publishes msg to the token stream s at sequence seq: an empty
// stream is purged up to seq (which sets its next sequence), a stream
// that holds tokens below seq is filled up to it on tokenGapSubject, and
// the publish expects seq-1 as the stream's last sequence. When seq is
// taken already (a worker stored a token in the new stream first), msg
// goes after it: it keeps its subject, not its number. filled says
// whether fillers were published.
func (h *heldTokens) putAt(ctx context.Context, s jetstream.Stream, seq uint64, msg *nats.Msg) (filled bool, err error) {
	for range 3 {
		info, err := s.Info(ctx)
		if err != nil {
			return filled, err
		}
		st := info.State
		switch {
		case st.LastSeq >= seq:
			h.log.Warn("a kept token could not have its sequence back: its readers may take it for lost", slog.Uint64("seq", seq), slog.Uint64("stream_last_seq", st.LastSeq))
			_, err := h.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(h.name))
			return filled, err
		case st.LastSeq+1 == seq:
		case st.Msgs == 0:
			// Nothing to lose: a purge up to seq makes seq the next
			// sequence (nats-server's memStore.Compact past the end). A
			// worker's token stored in the new stream between the look-up
			// and the purge would be erased; the stream takes writes only
			// since the reopening, a moment ago.
			if err := s.Purge(ctx, jetstream.WithPurgeSequence(seq)); err != nil {
				return filled, err
			}
		default:
			filled = true
			if err := h.fill(ctx, seq-1-st.LastSeq); err != nil {
				return filled, err
			}
		}
		_, err = h.js.PublishMsg(ctx, msg, jetstream.WithExpectStream(h.name), jetstream.WithExpectLastSequence(seq-1))
		var apiErr *jetstream.APIError
		if errors.As(err, &apiErr) && (apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || apiErr.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant) {
			continue // a worker's token came in between: look again
		}
		return filled, err
	}
	return filled, fmt.Errorf("the token at %d: the stream's sequence moved three times", seq)
}

// fill publishes n fillers on tokenGapSubject and waits for their
// acknowledgements.
func (h *heldTokens) fill(ctx context.Context, n uint64) error {
	const batch = 1000 // within the client's pending acknowledgements
	for n > 0 {
		k := min(n, batch)
		for range k {
			if _, err := h.js.PublishMsgAsync(&nats.Msg{Subject: tokenGapSubject}, jetstream.WithExpectStream(h.name)); err != nil {
				return err
			}
		}
		select {
		case <-h.js.PublishAsyncComplete():
		case <-ctx.Done():
			return ctx.Err()
		}
		n -= k
	}
	return nil
}

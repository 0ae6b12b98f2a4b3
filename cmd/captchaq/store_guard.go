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
// is left of its lifetime.
func (h *heldTokens) restore() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := time.Now()
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
		if _, err := h.js.PublishMsg(ctx, &nats.Msg{Subject: m.Subject, Header: hdr, Data: m.Data}, jetstream.WithExpectStream(h.name)); err != nil {
			return fmt.Errorf("store the tokens again: %w", err)
		}
	}
	h.msgs = nil
	return nil
}

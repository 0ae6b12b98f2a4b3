package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/wire"
)

// A worker process behind 1,000 forged task messages under one id (their
// Nats-Msg-Id is not the id), published at once by a plain client ahead of
// a producer's task: the task is solved within 20 s of the worker's start
// (docs/security.md, floods of forged messages), every forged message
// leaves the stream, and only the task is paid for.
func TestWorkerProcessOutlastsAOneIDFlood(t *testing.T) {
	t.Parallel()
	url, js, client := listeningServer(t, stream.Topology{})
	api, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.01, Seed: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	const flood = 1000
	for i := range flood {
		m := nats.NewMsg(wire.TaskSubject(wire.LaneFast, wire.PriorityNormal, "flood-1"))
		m.Data = []byte(`{"method":"turnstile","params":{"sitekey":"0x4AAAAAAAB","pageurl":"https://evil.example/"}}`)
		m.Header.Set(wire.HeaderMsgID, fmt.Sprintf("flood-1-forged-%d", i))
		_, err := js.PublishMsgAsync(m)
		require.NoError(t, err)
	}
	select {
	case <-js.PublishAsyncComplete():
	case <-ctx.Done():
		t.Fatal("the flood was not stored")
	}
	r, err := client.Submit(ctx, stream.Task{ID: "innocent-1", Method: "turnstile",
		Params: stream.Params{"sitekey": "0x4AAAAAAAB", "pageurl": "https://shop.example/checkout"}})
	require.NoError(t, err)

	start := time.Now()
	w := startProc(t, keyEnv, "worker", "--nats", url, "--solver-url", emu, "--poll-scale", "0.01", "--threads", "4")
	wctx, wcancel := context.WithTimeout(ctx, 20*time.Second)
	defer wcancel()
	out, err := client.Wait(wctx, r.ID)
	require.NoError(t, err, "the innocent task's outcome within 20 s of the worker's start")
	require.Equal(t, stream.StatusSolved, out.Status)
	t.Logf("innocent task solved %s after the worker process started", time.Since(start).Round(time.Millisecond))

	s, err := js.Stream(ctx, "CAPTCHA")
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		info, err := s.Info(ctx, jetstream.WithSubjectFilter(wire.TaskSubjectsFor("flood-1")))
		return err == nil && len(info.State.Subjects) == 0
	}, 20*time.Second, 50*time.Millisecond, "every forged message leaves the stream")
	t.Logf("flood gone %s after the worker process started", time.Since(start).Round(time.Millisecond))
	require.Equal(t, 1, api.Stats().Submitted, "only the innocent task is paid for")
	w.kill()
}

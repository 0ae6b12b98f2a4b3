package main

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// A worker says within seconds of starting, before any task arrives,
// whether the solving service answers and takes its key: an operator who
// starts an idle worker with a wrong URL or key reads it in its log at
// once, not at the first task (maybe hours later, under load).
func TestWorkerChecksTheServiceAtStart(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	nowhere := freeAddr(t)

	good := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", emu, "--threads", "1")
	good.waitLine("the solving service answers and takes the key", 10*time.Second)

	refused := startProc(t, []string{"CAPTCHAAI_API_KEY=ffffffffffffffffffffffffffffffff"}, "worker", "--nats", natsURL,
		"--solver-url", emu, "--threads", "1")
	refused.waitLine("the solving service refuses this worker", 10*time.Second)
	require.Contains(t, refused.output(), "ERROR_KEY_DOES_NOT_EXIST")
	require.NotContains(t, refused.output(), "ffffffffffffffffffffffffffffffff", "the key is never logged")

	unreachable := startProc(t, keyEnv, "worker", "--nats", natsURL, "--solver-url", "http://"+nowhere, "--threads", "1")
	unreachable.waitLine("connection refused to "+nowhere+": is the service's URL right?", 10*time.Second)
	require.False(t, strings.Contains(unreachable.output(), "answers and takes the key"))
}

// A worker given credentials that may not take tasks (the producer's, by
// mistake) stops at once and says which role it needs, instead of running
// on, logging refusals every second while nothing is solved.
func TestWorkerWithoutTheRightToTakeTasksStops(t *testing.T) {
	t.Parallel()
	url := startServer(t)
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	w := startProc(t, keyEnv, append([]string{"worker", "--nats", url, "--solver-url", emu, "--threads", "1"}, as("producer")...)...)
	require.Equal(t, 3, w.wait(30*time.Second), "the worker stops with an error")
	out := w.output()
	require.Contains(t, out, `captchaq worker: permission denied: user "producer" may not publish to "$JS.API.CONSUMER.MSG.NEXT.CAPTCHA.workers-`)
	require.Contains(t, out, "this user may not take tasks: a worker needs the worker role of nats.conf")
}

// solve with no worker alive says so within seconds, instead of a silent
// terminal until --timeout.
func TestSolveSaysNoWorkerIsAlive(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	p := startProc(t, []string{"CAPTCHAQ_NATS=" + natsURL}, "solve", "--id", "lonely", "--method", "turnstile",
		"--param", "sitekey=0x4AAAAAAAB", "--param", "pageurl=https://shop.example/", "--timeout", "60s")
	p.waitLine("captchaq solve: no worker is alive (captchaq workers ls lists them); task lonely waits in the queue until one starts", 15*time.Second)
}

package gateway_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// reportsServed runs the workers' side of reports (gateway.ServeReports)
// with the Env's solver client, which holds the service's key, on a
// connection of its own.
func reportsServed(t *testing.T, env *streamtest.Env) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	stop, err := gateway.ServeReports(ctx, env.Connect(nats.Name("reporter")), env.Topology, env.Solver, nil)
	require.NoError(t, err)
	t.Cleanup(stop)
}

// reportgood and reportbad reach the service through a worker, with the
// service's captcha id of the answer, and answer the service's codes: the
// report taken (OK_REPORT_RECORDED, bare as the service answers it:
// solver/testdata/service/replies.json), a second one
// ERROR_DUPLICATE_REPORT; a task that is not the caller's or not solved is
// refused without a call to the service.
func TestReportsAreForwardedThroughAWorker(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reportsServed(t, b.env)
	id := b.submit(t, alice)
	require.Contains(t, b.await(t, alice, id), "OK|")
	require.Equal(t, "OK_REPORT_RECORDED", b.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", id))
	require.Equal(t, 1, b.env.Emulator.Stats().ReportsBad)
	require.Equal(t, "ERROR_DUPLICATE_REPORT", b.call(t, "res.php", "key", alice.Key, "action", "reportgood", "id", id))
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", bob.Key, "action", "reportbad", "id", id), "not bob's task")
	require.Equal(t, "ERROR_WRONG_CAPTCHA_ID", b.call(t, "res.php", "key", alice.Key, "action", "reportgood", "id", "123456789012345678"))

	second := b.submit(t, alice)
	require.Contains(t, b.await(t, alice, second), "OK|")
	var res struct {
		Status  int    `json:"status"`
		Request string `json:"request"`
	}
	require.NoError(t, json.Unmarshal([]byte(b.call(t, "res.php", "key", alice.Key, "action", "reportgood", "id", second, "json", "1")), &res))
	require.Equal(t, 1, res.Status)
	require.Equal(t, "OK_REPORT_RECORDED", res.Request)
	st := b.env.Emulator.Stats()
	require.Equal(t, []int{1, 1}, []int{st.ReportsGood, st.ReportsBad})
}

// With no worker serving reports, a report answers the service's code for
// one it did not take; so does a report of a task with no answer (dead,
// or not solved yet), without a call to the service.
func TestReportWithoutAWorkerOrWithoutAnAnswer(t *testing.T) {
	t.Parallel()
	b := setup(t, nil, streamtest.WithFaults(fakeapi.Faults{Rules: []fakeapi.Rule{{Param: "pageurl", Contains: "dead.example", Code: "ERROR_PAGEURL"}}}))
	id := b.submit(t, alice)
	require.Contains(t, b.await(t, alice, id), "OK|")
	require.Equal(t, "ERROR_REPORT_NOT_RECORDED", b.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", id))

	reportsServed(t, b.env)
	out := b.call(t, "in.php", "key", alice.Key, "method", "turnstile", "sitekey", "0x4AAAAAAABkMYinukE8nzY", "pageurl", "https://dead.example/")
	dead := strings.TrimPrefix(out, "OK|")
	require.Equal(t, "ERROR_PAGEURL", b.await(t, alice, dead))
	require.Equal(t, "ERROR_REPORT_NOT_RECORDED", b.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", dead))
	require.Zero(t, b.env.Emulator.Stats().ReportsBad)
	require.Equal(t, "OK_REPORT_RECORDED", b.call(t, "res.php", "key", alice.Key, "action", "reportbad", "id", id))
}

// A report request is anyone's with producer rights, not only the
// gateway's: one that names a solved task and the captcha id of another
// answer is refused without a call to the service, so nobody reports a
// captcha that is not the named task's own.
func TestReportOfAForeignCaptchaIDRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, nil)
	reportsServed(t, b.env)
	mine := b.submit(t, alice)
	require.Contains(t, b.await(t, alice, mine), "OK|")
	theirs := b.submit(t, bob)
	require.Contains(t, b.await(t, bob, theirs), "OK|")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := b.env.Client.Wait(ctx, "bob-"+theirs) // the task ids the gateway gave the two submissions
	require.NoError(t, err)
	require.NotEmpty(t, out.CaptchaID)

	nc := b.env.Connect(nats.Name("raw-producer"))
	req, err := json.Marshal(map[string]any{"task": "alice-" + mine, "captcha_id": out.CaptchaID, "good": false})
	require.NoError(t, err)
	msg, err := nc.Request(gateway.ReportSubject, req, 10*time.Second)
	require.NoError(t, err)
	require.Contains(t, string(msg.Data), "ERROR_WRONG_CAPTCHA_ID")
	require.Zero(t, b.env.Emulator.Stats().ReportsBad, "bob's captcha was reported through alice's task")
}

package gateway_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/captchaq/captchaq/gateway"
	"github.com/captchaq/captchaq/internal/dialect/createtask"
	"github.com/captchaq/captchaq/stream"
	"github.com/captchaq/captchaq/stream/streamtest"
)

// benchSetup is setup for benchmarks: no rate limits, a keep-alive HTTP
// client.
func benchSetup(b *testing.B, opts ...streamtest.Option) (*streamtest.Env, string, *http.Client) {
	b.Helper()
	env := streamtest.Start(b, opts...)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	gw, err := gateway.New(ctx, gateway.Config{Conn: env.Connect(nats.Name("gateway")), Topology: env.Topology,
		Keys: []gateway.Key{alice}, Now: env.Now, Limits: gateway.Limits{Submits: -1, Polls: -1}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(gw.Close)
	srv := httptest.NewServer(gw)
	b.Cleanup(srv.Close)
	return env, srv.URL, &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}
}

func get(b *testing.B, c *http.Client, u string) string {
	resp, err := c.Get(u)
	if err != nil {
		b.Fatal(err)
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	return string(body)
}

var benchTask = stream.Task{Method: "turnstile", Params: stream.Params{"sitekey": "0x4AAAAAAABkMYinukE8nzY", "pageurl": "https://shop.example/checkout"}}

func inURL(base string) string {
	v := url.Values{"key": {alice.Key}, "method": {"turnstile"}, "sitekey": {"0x4AAAAAAABkMYinukE8nzY"}, "pageurl": {"https://shop.example/checkout"}}
	return base + "/in.php?" + v.Encode()
}

// The cost of a submission: in.php through the gateway (HTTP on
// loopback, parsing, validation, Submit) against stream.Client.Submit.
func BenchmarkSubmitDirect(b *testing.B) {
	env := streamtest.Start(b, streamtest.WithWorkers(0))
	ctx := context.Background()
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		if _, err := env.Client.Submit(ctx, benchTask); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, cpu)
}

func BenchmarkSubmitGateway(b *testing.B) {
	_, base, c := benchSetup(b, streamtest.WithWorkers(0))
	u := inURL(base)
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		if out := get(b, c, u); !strings.HasPrefix(out, "OK|") {
			b.Fatal(out)
		}
	}
	reportCPU(b, cpu)
}

// The latency of one solve, one at a time, against the emulator (1-5 ms
// solves): Client.Solve against in.php and res.php polled every
// millisecond. The difference of the p50s is the gateway's overhead on a
// task's way (HTTP, the outcome follower, the polls' granularity).
func BenchmarkSolveDirect(b *testing.B) {
	env := streamtest.Start(b)
	ctx := context.Background()
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		if _, err := env.Client.Solve(ctx, benchTask); err != nil {
			b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	reportP50(b, lat)
}

func BenchmarkSolveGateway(b *testing.B) {
	_, base, c := benchSetup(b)
	u := inURL(base)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		out := get(b, c, u)
		if !strings.HasPrefix(out, "OK|") {
			b.Fatal(out)
		}
		res := base + "/res.php?" + url.Values{"key": {alice.Key}, "action": {"get"}, "id": {out[3:]}}.Encode()
		for {
			out = get(b, c, res)
			if out != "CAPCHA_NOT_READY" {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !strings.HasPrefix(out, "OK|") {
			b.Fatal(out)
		}
		lat = append(lat, time.Since(start))
	}
	reportP50(b, lat)
}

// cpuTime is the process's CPU time so far (user and system): the
// benchmark, the HTTP client and server, and the embedded nats-server.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, since time.Duration) {
	b.ReportMetric(float64((cpuTime()-since).Microseconds())/float64(b.N), "cpu-µs/task")
}

func reportP50(b *testing.B, lat []time.Duration) {
	slices.Sort(lat)
	b.ReportMetric(float64(lat[len(lat)/2].Microseconds())/1000, "p50-ms")
}

// The JSON dialect's createTask and getTaskResult, beside in.php and
// res.php above.
var createBody = `{"clientKey":"` + alice.Key + `","task":{"type":"TurnstileTaskProxyless","websiteURL":"https://shop.example/checkout","websiteKey":"0x4AAAAAAABkMYinukE8nzY"}}`

func postJSON(b *testing.B, c *http.Client, u, body string) string {
	resp, err := c.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		b.Fatal(err)
	}
	out, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		b.Fatal(err)
	}
	return string(out)
}

// taskIDOf is createTask's taskId, or fails.
func taskIDOf(b *testing.B, reply string) string {
	var r createtask.CreateTaskResponse
	if err := createtask.Decode([]byte(reply), &r); err != nil || r.TaskID == 0 {
		b.Fatal(reply)
	}
	return r.TaskID.String()
}

func BenchmarkSubmitGatewayJSON(b *testing.B) {
	_, base, c := benchSetup(b, streamtest.WithWorkers(0))
	b.ReportAllocs()
	cpu := cpuTime()
	for b.Loop() {
		taskIDOf(b, postJSON(b, c, base+"/createTask", createBody))
	}
	reportCPU(b, cpu)
}

func BenchmarkSolveGatewayJSON(b *testing.B) {
	_, base, c := benchSetup(b)
	var lat []time.Duration
	for b.Loop() {
		start := time.Now()
		id := taskIDOf(b, postJSON(b, c, base+"/createTask", createBody))
		poll := `{"clientKey":"` + alice.Key + `","taskId":` + id + `}`
		var out string
		for {
			out = postJSON(b, c, base+"/getTaskResult", poll)
			if !strings.Contains(out, `"status":"processing"`) {
				break
			}
			time.Sleep(time.Millisecond)
		}
		if !strings.Contains(out, `"status":"ready"`) {
			b.Fatal(out)
		}
		lat = append(lat, time.Since(start))
	}
	reportP50(b, lat)
}

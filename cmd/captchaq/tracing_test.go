package main

import (
	"encoding/hex"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"

	"github.com/captchaq/captchaq/solver/fakeapi"
	"github.com/captchaq/captchaq/stream"
)

// otlpSpan is what the test reads of an exported span.
type otlpSpan struct {
	service, name, trace, id, parent string
}

// otlpReceiver is an OTLP/HTTP trace receiver on 127.0.0.1.
func otlpReceiver(t *testing.T) (string, func() []otlpSpan) {
	t.Helper()
	var mu sync.Mutex
	var spans []otlpSpan
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if err != nil || r.URL.Path != "/v1/traces" || proto.Unmarshal(b, &req) != nil {
			http.Error(w, "bad export", http.StatusBadRequest)
			return
		}
		mu.Lock()
		for _, rs := range req.ResourceSpans {
			service := ""
			for _, a := range rs.Resource.GetAttributes() {
				if a.Key == "service.name" {
					service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					spans = append(spans, otlpSpan{service: service, name: s.Name, trace: hex.EncodeToString(s.TraceId),
						id: hex.EncodeToString(s.SpanId), parent: hex.EncodeToString(s.ParentSpanId)})
				}
			}
		}
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
		out, _ := proto.Marshal(&collectortrace.ExportTraceServiceResponse{})
		_, _ = w.Write(out)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, func() []otlpSpan {
		mu.Lock()
		defer mu.Unlock()
		return append([]otlpSpan(nil), spans...)
	}
}

// With the standard OTEL_* variables set, `captchaq solve` and a worker
// process export one trace: the solve's span, the worker's attempt under it
// (carried in the task's W3C headers), and the in.php call under that.
func TestTracesAcrossProcesses(t *testing.T) {
	t.Parallel()
	natsURL, _, _ := listeningServer(t, stream.Topology{})
	_, emu := emulatorURL(t, fakeapi.Config{TimeScale: 0.001})
	endpoint, spans := otlpReceiver(t)
	env := append([]string{"OTEL_EXPORTER_OTLP_ENDPOINT=" + endpoint, "OTEL_BSP_SCHEDULE_DELAY=50"}, keyEnv...)
	startProc(t, env, "worker", "--nats", natsURL, "--solver-url", emu, "--poll-scale", "0.001", "--threads", "1")

	r := captchaqEnv(t, natsURL, env, "solve", "--id", "traced-1", "--method", "turnstile", "--param", "sitekey=k", "--param", "pageurl=https://a.example/")
	require.Equal(t, 0, r.code, r.stderr)

	var solve, attempt, call otlpSpan
	require.Eventually(t, func() bool {
		for _, s := range spans() {
			switch {
			case s.name == "captchaq solve" && s.service == "captchaq-solve":
				solve = s
			case s.name == "captchaq attempt" && s.service == "captchaq-worker":
				attempt = s
			case s.name == "in.php" && s.service == "captchaq-worker":
				call = s
			}
		}
		return solve.id != "" && attempt.id != "" && call.id != ""
	}, 20*time.Second, 20*time.Millisecond, "spans exported: %v", spans)
	require.Equal(t, solve.trace, attempt.trace, "one trace")
	require.Equal(t, solve.id, attempt.parent, "the worker's attempt continues the producer's span")
	require.Equal(t, attempt.id, call.parent, "in.php under the attempt")
	require.Equal(t, attempt.trace, call.trace)
}

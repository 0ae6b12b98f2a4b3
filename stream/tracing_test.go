package stream

import (
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/solver/fakeapi"
)

// One tracer provider for the test binary: otel's is global, and parallel
// tests must not swap it under each other. Tests find their spans by trace
// id.
var (
	spansOnce sync.Once
	spans     *tracetest.SpanRecorder
)

func recordSpans() *tracetest.SpanRecorder {
	spansOnce.Do(func() {
		spans = tracetest.NewSpanRecorder()
		otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans)))
	})
	return spans
}

// A producer's span continues in the worker's attempt span, through the
// task message's W3C headers, and the solver's calls are children of the
// attempt.
func TestTraceContextTravelsWithTheTask(t *testing.T) {
	t.Parallel()
	rec := recordSpans()
	b := setup(t, Topology{})
	ctx := testContext(t)
	b.startWorker(t, WorkerConfig{Solver: unbatchedEmulator(t)})

	pctx, span := otel.Tracer("test").Start(ctx, "checkout")
	r, err := b.client.Submit(pctx, turnstileTask("traced"))
	require.NoError(t, err)
	span.End()
	m, err := b.client.s.GetMsg(ctx, r.Seq)
	require.NoError(t, err)
	require.Regexp(t, `^00-`+span.SpanContext().TraceID().String()+`-`+span.SpanContext().SpanID().String()+`-01$`, m.Header.Get("traceparent"))
	_, err = b.client.Wait(ctx, "traced")
	require.NoError(t, err)

	trace := span.SpanContext().TraceID()
	var attempt sdktrace.ReadOnlySpan
	var calls []sdktrace.ReadOnlySpan
	require.Eventually(t, func() bool {
		attempt, calls = nil, nil
		for _, s := range rec.Ended() {
			if s.SpanContext().TraceID() != trace {
				continue
			}
			switch s.Name() {
			case "captchaq attempt":
				attempt = s
			case "in.php", "res.php":
				calls = append(calls, s)
			}
		}
		return attempt != nil && len(calls) >= 2
	}, 10*time.Second, 10*time.Millisecond, "the attempt and its calls end")
	require.Equal(t, span.SpanContext().SpanID(), attempt.Parent().SpanID(), "the attempt continues the producer's span")
	require.True(t, attempt.Parent().IsRemote())
	for _, c := range calls {
		require.Equal(t, attempt.SpanContext().SpanID(), c.Parent().SpanID(), "%s is a child of the attempt", c.Name())
		for _, a := range c.Attributes() {
			require.NotContains(t, a.Value.Emit(), fakeapi.TestKey)
		}
	}
}

// unbatchedEmulator is a solver client against the emulator that polls each
// captcha on its own (every poll is a call of the attempt's), fast.
func unbatchedEmulator(t *testing.T) solver.Solver {
	t.Helper()
	api := fakeapi.New(fakeapi.Config{BurstLimit: 1 << 20, SolveTime: map[string]fakeapi.Range{fakeapi.KindTurnstile: fixed(5 * time.Millisecond)}})
	srv := httptest.NewServer(api)
	t.Cleanup(srv.Close)
	c, err := solver.NewClient(solver.Config{BaseURL: srv.URL, APIKey: fakeapi.TestKey, MinSubmitInterval: -1, SubmitBurst: -1,
		Timing: solver.Timing{Scale: 0.001, NoBatch: true}})
	require.NoError(t, err)
	return c
}

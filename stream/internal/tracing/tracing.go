// Package tracing carries OpenTelemetry trace context in NATS headers, for
// the producer's span to continue in the worker's attempt span.
package tracing

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// Tracing is OpenTelemetry's and off unless the program installs a tracer
// provider (otel.SetTracerProvider): the default one records nothing. The
// trace context always travels in W3C form (traceparent, tracestate) in the
// task message's headers, so a producer's span continues in the worker's
// attempt span, and the solver's in.php/res.php spans under it.
var traceContext propagation.TraceContext

// Tracer is the tracer of captchaq's spans.
func Tracer() trace.Tracer { return otel.Tracer("github.com/captchaq/captchaq/stream") }

// HeaderCarrier carries the trace context in NATS headers under W3C's own
// lowercase names (traceparent, tracestate): NATS header names are
// case-sensitive, and HTTP's carrier would write Traceparent.
type HeaderCarrier nats.Header

func (h HeaderCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h HeaderCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h HeaderCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// Inject puts the span context of ctx, if any, into h.
func Inject(ctx context.Context, h nats.Header) {
	traceContext.Inject(ctx, HeaderCarrier(h))
}

// Extract returns ctx with the span context h carries, if any.
func Extract(ctx context.Context, h nats.Header) context.Context {
	return traceContext.Extract(ctx, HeaderCarrier(h))
}

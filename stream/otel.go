package stream

import (
	"context"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/wire"
)

// Tracing is OpenTelemetry's and off unless the program installs a tracer
// provider (otel.SetTracerProvider): the default one records nothing. The
// trace context always travels in W3C form (traceparent, tracestate) in the
// task message's headers, so a producer's span continues in the worker's
// attempt span, and the solver's in.php/res.php spans under it.
var traceContext propagation.TraceContext

func tracer() trace.Tracer { return otel.Tracer("github.com/captchaq/captchaq/stream") }

// headerCarrier carries the trace context in NATS headers under W3C's own
// lowercase names (traceparent, tracestate): NATS header names are
// case-sensitive, and HTTP's carrier would write Traceparent.
type headerCarrier nats.Header

func (h headerCarrier) Get(key string) string { return nats.Header(h).Get(key) }
func (h headerCarrier) Set(key, value string) { nats.Header(h).Set(key, value) }
func (h headerCarrier) Keys() []string {
	keys := make([]string, 0, len(h))
	for k := range h {
		keys = append(keys, k)
	}
	return keys
}

// injectTrace puts the span context of ctx, if any, into a task message's
// headers.
func injectTrace(ctx context.Context, msg *nats.Msg) {
	traceContext.Inject(ctx, headerCarrier(msg.Header))
}

// traceAttempt starts the span of one solving attempt, as a child of the
// producer's span whose context the task message carries; end closes it
// with the attempt's error.
func traceAttempt(ctx context.Context, d *delivery) (context.Context, func(error)) {
	parent := traceContext.Extract(ctx, headerCarrier(d.m.Headers()))
	ctx, span := tracer().Start(parent, "captchaq attempt", trace.WithSpanKind(trace.SpanKindConsumer),
		trace.WithAttributes(attribute.String("captchaq.task_id", d.id), attribute.String("captchaq.method", d.task.Method),
			attribute.Int64("captchaq.delivery", int64(d.number)), attribute.String("server.address", wire.PageHost(d.task.Params))))
	return ctx, func(err error) {
		if err != nil {
			span.SetStatus(codes.Error, solver.CodeOf(err))
			span.SetAttributes(attribute.String("captchaq.code", solver.CodeOf(err)))
		}
		span.End()
	}
}

package executor

import (
	"context"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/captchaq/captchaq/solver"
	"github.com/captchaq/captchaq/stream/internal/tracing"
	"github.com/captchaq/captchaq/stream/wire"
)

// traceAttempt starts the span of one solving attempt, as a child of the
// producer's span whose context the task message carries; end closes it
// with the attempt's error.
func traceAttempt(ctx context.Context, d *delivery) (context.Context, func(error)) {
	parent := tracing.Extract(ctx, d.m.Headers())
	ctx, span := tracing.Tracer().Start(parent, "captchaq attempt", trace.WithSpanKind(trace.SpanKindConsumer),
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

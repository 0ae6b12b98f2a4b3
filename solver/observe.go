package solver

import (
	"context"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/captchaq/captchaq/retry"
)

// Call is one request to the service, as Config.OnCall receives it: for
// metrics and traces. It never holds the key, a token or a URL.
type Call struct {
	// Op is the endpoint: "in.php" or "res.php".
	Op string
	// Batch marks a res.php poll of several captchas (action=get&ids=…).
	Batch bool
	// Code is the answer: OK, the service's code (CAPCHA_NOT_READY,
	// ERROR_…), HTTP_<status>, BAD_REPLY or NETWORK as Error.Code has them;
	// CANCELED when the caller's context ended first.
	Code string
	// Class is Code's retry class; for OK, retry.Transient (unused).
	Class retry.Class
	// Duration is the time from sending the request to reading the reply.
	Duration time.Duration
}

// observe reports a call that started at start and ended with err (nil: OK)
// to Config.OnCall.
func (c *Client) observe(op string, batch bool, start time.Time, err error) {
	if c.onCall == nil {
		return
	}
	call := Call{Op: op, Batch: batch, Code: "OK", Duration: c.now().Sub(start)}
	if err != nil {
		call.Code, call.Class = CodeOf(err), ClassOf(err)
		if call.Code == "" {
			call.Code = CodeCanceled
		}
	}
	c.onCall(call)
}

// traceCall starts the span of one request to the service, a child of ctx's
// (the worker's attempt); with no tracer provider installed it records
// nothing. The span carries the endpoint and the answer code, never the key,
// a token or a URL.
func traceCall(ctx context.Context, op string) (context.Context, func(error)) {
	ctx, span := otel.Tracer("github.com/captchaq/captchaq/solver").Start(ctx, op, trace.WithSpanKind(trace.SpanKindClient))
	return ctx, func(err error) {
		code := "OK"
		if err != nil {
			code = CodeOf(err)
			span.SetStatus(codes.Error, code)
		}
		span.SetAttributes(attribute.String("captchaq.code", code))
		span.End()
	}
}

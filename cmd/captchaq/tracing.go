package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	sdkresource "go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
)

// startTracing installs an OpenTelemetry tracer provider that exports spans
// with OTLP over HTTP, when the standard environment asks for it:
// OTEL_TRACES_EXPORTER=otlp, or an OTEL_EXPORTER_OTLP_ENDPOINT /
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT (OTEL_SERVICE_NAME, OTEL_RESOURCE_ATTRIBUTES,
// OTEL_TRACES_SAMPLER and the exporter's OTEL_EXPORTER_OTLP_* are read by the
// SDK). Otherwise tracing stays off and nothing is recorded. The returned
// function flushes what is buffered.
func startTracing(ctx context.Context, service string) (func(), error) {
	exporter := os.Getenv("OTEL_TRACES_EXPORTER")
	endpoint := os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT") + os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
	switch {
	case exporter == "none", exporter == "" && endpoint == "":
		return func() {}, nil
	case exporter != "" && exporter != "otlp":
		return nil, fmt.Errorf("OTEL_TRACES_EXPORTER=%q: captchaq exports traces with otlp (over HTTP) or none", exporter)
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("tracing: %w", err)
	}
	// The command names the service unless OTEL_SERVICE_NAME or
	// OTEL_RESOURCE_ATTRIBUTES do: later detectors win.
	res, err := sdkresource.New(ctx, sdkresource.WithAttributes(attribute.String("service.name", service)),
		sdkresource.WithTelemetrySDK(), sdkresource.WithHost(), sdkresource.WithFromEnv())
	if err != nil {
		res = sdkresource.Default()
	}
	tp := sdktrace.NewTracerProvider(sdktrace.WithBatcher(exp), sdktrace.WithResource(res))
	otel.SetTracerProvider(tp)
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	return func() {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = tp.Shutdown(sctx)
	}, nil
}

import { Code, type Interceptor } from "@connectrpc/connect";
import { context, propagation, SpanKind, SpanStatusCode, trace, type Context, type Span, type TextMapGetter, type TextMapSetter, type Tracer } from "@opentelemetry/api";
import { W3CTraceContextPropagator } from "@opentelemetry/core";
import { OTLPTraceExporter } from "@opentelemetry/exporter-trace-otlp-proto";
import { resourceFromAttributes } from "@opentelemetry/resources";
import { BatchSpanProcessor, SimpleSpanProcessor, type SpanExporter } from "@opentelemetry/sdk-trace-base";
import { NodeTracerProvider } from "@opentelemetry/sdk-trace-node";
import { codeOfError } from "./errors.js";

/**
 * OpenTelemetry tracing (the OTel SDK). Off unless OTEL_EXPORTER_OTLP_ENDPOINT or
 * OTEL_EXPORTER_OTLP_TRACES_ENDPOINT is set (the standard variables; the OTLP/HTTP protobuf
 * exporter reads them and OTEL_EXPORTER_OTLP_HEADERS itself), or a test passes an exporter. Off,
 * every span is the API's no-op. W3C trace context (`traceparent`) travels in gRPC/Connect
 * metadata (the interceptors below) and NATS headers; a job's context is kept with the job so
 * that Approve, the scheduler's signal, the executor's phases and CompleteJob are one trace.
 */
export interface Tracing {
  /** Whether spans are recorded and exported. */
  readonly enabled: boolean;
  /** Exports what is buffered and stops (part of shutdown). */
  shutdown(): Promise<void>;
}

/** Starts tracing for this process when the environment (or `exporter`) asks for it; the provider is global. */
export function setupTracing(serviceName: string, o: { readonly env?: Readonly<Record<string, string | undefined>>; readonly exporter?: SpanExporter } = {}): Tracing {
  const env = o.env ?? process.env;
  const endpoint = env["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] || env["OTEL_EXPORTER_OTLP_ENDPOINT"];
  if (!o.exporter && !endpoint) return { enabled: false, shutdown: async () => undefined };
  const provider = new NodeTracerProvider({
    resource: resourceFromAttributes({ "service.name": env["OTEL_SERVICE_NAME"] || serviceName }),
    // A test's in-memory exporter sees each span as it ends; the OTLP exporter gets batches.
    spanProcessors: [o.exporter ? new SimpleSpanProcessor(o.exporter) : new BatchSpanProcessor(new OTLPTraceExporter())],
  });
  provider.register({ propagator: new W3CTraceContextPropagator() });
  return {
    enabled: true,
    async shutdown() {
      await provider.shutdown();
      trace.disable();
      propagation.disable();
      context.disable();
    },
  };
}

/** The tracer of one Seraph service (its instrumentation scope). */
export function tracerOf(service: string): Tracer {
  return trace.getTracer(`seraph-${service}`);
}

const headerGetter: TextMapGetter<Headers> = {
  keys: (h) => [...h.keys()],
  get: (h, k) => h.get(k) ?? undefined,
};
const headerSetter: TextMapSetter<Headers> = { set: (h, k, v) => h.set(k, v) };

/** The W3C `traceparent` of `ctx` (default: the active context), or "" when none is recorded. */
export function traceparentOf(ctx: Context = context.active()): string {
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  return carrier["traceparent"] ?? "";
}

/** A context whose parent is the W3C `traceparent` given (the root context for ""). */
export function contextFromTraceparent(traceparent: string): Context {
  return traceparent === "" ? context.active() : propagation.extract(context.active(), { traceparent });
}

/** The gRPC status name of an error (domain errors by their code). */
function statusOf(err: unknown): { code: number; name: string } {
  const code = codeOfError(err);
  return { code, name: Code[code] };
}

/** Ends `span` with the error's gRPC status. */
function failed(span: Span, err: unknown): void {
  const s = statusOf(err);
  span.setAttribute("rpc.grpc.status_code", s.code);
  span.setStatus({ code: SpanStatusCode.ERROR, message: s.name });
  span.end();
}

/**
 * The server side: each RPC is a SERVER span `<service>/<method>`, a child of the caller's
 * `traceparent`, active while the handler runs (so its client calls and log lines carry it).
 */
export function createServerTracingInterceptor(service: string): Interceptor {
  const tracer = tracerOf(service);
  return (next) => async (req) => {
    const parent = propagation.extract(context.active(), req.header, headerGetter);
    const span = tracer.startSpan(`${req.service.typeName}/${req.method.name}`, { kind: SpanKind.SERVER, attributes: { "rpc.system": "grpc", "rpc.service": req.service.typeName, "rpc.method": req.method.name } }, parent);
    try {
      const res = await context.with(trace.setSpan(parent, span), () => next(req));
      if (!res.stream) {
        span.setAttribute("rpc.grpc.status_code", 0);
        span.end();
        return res;
      }
      const inner = res.message;
      async function* traced() {
        try {
          yield* inner;
          span.setAttribute("rpc.grpc.status_code", 0);
          span.end();
        } catch (err) {
          failed(span, err);
          throw err;
        }
      }
      return { ...res, message: traced() };
    } catch (err) {
      failed(span, err);
      throw err;
    }
  };
}

/** The client side: each call is a CLIENT span, its `traceparent` sent in the request metadata. */
export function createClientTracingInterceptor(service: string): Interceptor {
  const tracer = tracerOf(service);
  return (next) => async (req) => {
    const span = tracer.startSpan(`${req.service.typeName}/${req.method.name}`, { kind: SpanKind.CLIENT, attributes: { "rpc.system": "grpc", "rpc.service": req.service.typeName, "rpc.method": req.method.name } });
    const ctx = trace.setSpan(context.active(), span);
    propagation.inject(ctx, req.header, headerSetter);
    try {
      const res = await context.with(ctx, () => next(req));
      span.setAttribute("rpc.grpc.status_code", 0);
      span.end();
      return res;
    } catch (err) {
      failed(span, err);
      throw err;
    }
  };
}

/** The active span's ids for a log line (`trace_id`, `span_id`), or nothing when no span is recorded. */
export function logTraceFields(): Record<string, string> {
  const s = trace.getActiveSpan()?.spanContext();
  if (!s || !trace.isSpanContextValid(s) || s.traceFlags === 0) return {};
  return { trace_id: s.traceId, span_id: s.spanId };
}

/** Records a finished child span with its own times (ms since the epoch), e.g. a phase measured before. */
export type RecordSpan = (name: string, startMs: number, endMs: number, attributes?: Readonly<Record<string, string | number | boolean>>) => void;

/**
 * Runs `fn` inside a new INTERNAL span `name` of `service`, a child of `traceparent` when given
 * (else of the active context), active for everything `fn` awaits (its RPCs and log lines carry
 * it). `fn` may record finished child spans with their own times. The span ends with `fn`.
 */
export async function inSpan<T>(
  service: string,
  name: string,
  o: { readonly traceparent?: string; readonly attributes?: Readonly<Record<string, string | number | boolean>>; readonly startMs?: number },
  fn: (record: RecordSpan) => Promise<T>,
): Promise<T> {
  const tracer = tracerOf(service);
  const parent = o.traceparent ? contextFromTraceparent(o.traceparent) : context.active();
  const span = tracer.startSpan(name, { attributes: o.attributes ?? {}, ...(o.startMs ? { startTime: o.startMs } : {}) }, parent);
  const ctx = trace.setSpan(parent, span);
  const record: RecordSpan = (child, startMs, endMs, attributes) => tracer.startSpan(child, { startTime: startMs, attributes: attributes ?? {} }, ctx).end(endMs);
  try {
    const out = await context.with(ctx, () => fn(record));
    span.end();
    return out;
  } catch (err) {
    span.recordException(err as Error);
    span.setStatus({ code: SpanStatusCode.ERROR, message: (err as Error)?.message ?? String(err) });
    span.end();
    throw err;
  }
}

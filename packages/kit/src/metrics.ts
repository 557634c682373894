import type { Interceptor } from "@connectrpc/connect";
import http from "node:http";
import type { AddressInfo } from "node:net";
import type { Logger } from "pino";
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry, type Metric } from "prom-client";
import { codeOfError } from "./errors.js";
import { grpcCodeName } from "./nats-requests.js";

/**
 * The Prometheus metrics of one process (prom-client). One registry per process: in embedded
 * mode the four services share it, and their RPC series stay apart by `grpc_service` (each
 * service has its own proto package). Names follow the Prometheus conventions (base units,
 * `_total` counters, `_seconds` durations) and every label has a bounded set of values: no job,
 * repair or principal id is ever a label.
 */
export interface Metrics {
  readonly registry: Registry;
  /** The RPC interceptor (outermost): `grpc_server_started_total`, `_handled_total`, `_handling_seconds`. */
  readonly rpcInterceptor: Interceptor;
  /** The metric named `name`, created by `make` the first time (a second service in the process reuses it). */
  metric<M extends Metric>(name: string, make: (registry: Registry) => M): M;
  /** Records a NATS connection status event (`seraph_nats_connected`, `seraph_nats_reconnects_total`); "connect" for the first connection. */
  natsStatus(type: string): void;
  /** Exposes a pg Pool's connections as `seraph_db_pool_connections{state}` (total, idle, waiting). */
  observePool(pool: PoolCounts): void;
}

/** What a pg Pool tells of its connections. */
export interface PoolCounts {
  readonly totalCount: number;
  readonly idleCount: number;
  readonly waitingCount: number;
}

/** Buckets of RPC handling times (seconds): 1 ms to 30 s. */
export const RPC_SECONDS_BUCKETS = [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30];
/** Buckets of a job's phases and of approve → start (seconds): 10 ms to 10 min. */
export const JOB_SECONDS_BUCKETS = [0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600];

/** A fresh registry with the process and Node.js default metrics and the RPC and NATS series. */
export function createMetrics(): Metrics {
  const registry = new Registry();
  collectDefaultMetrics({ register: registry });
  const metric = <M extends Metric>(name: string, make: (r: Registry) => M): M => (registry.getSingleMetric(name) as M | undefined) ?? make(registry);
  const labelNames = ["grpc_service", "grpc_method", "grpc_type"] as const;
  const started = new Counter({ name: "grpc_server_started_total", help: "RPCs started on the server.", labelNames, registers: [registry] });
  const handled = new Counter({ name: "grpc_server_handled_total", help: "RPCs completed on the server, by status code.", labelNames: [...labelNames, "grpc_code"], registers: [registry] });
  const seconds = new Histogram({ name: "grpc_server_handling_seconds", help: "Time from an RPC's start to its answer (unary) or its end (streams).", labelNames, buckets: RPC_SECONDS_BUCKETS, registers: [registry] });
  // Only a process that has a NATS connection exports these (embedded mode has none).
  let nats: { connected: Gauge; reconnects: Counter } | undefined;
  const natsMetrics = () =>
    (nats ??= {
      connected: new Gauge({ name: "seraph_nats_connected", help: "1 while the NATS connection is up, 0 while it is down or reconnecting.", registers: [registry] }),
      reconnects: new Counter({ name: "seraph_nats_reconnects_total", help: "NATS reconnections after a lost connection.", registers: [registry] }),
    });
  const pools = new Set<PoolCounts>();
  new Gauge({
    name: "seraph_db_pool_connections",
    help: "PostgreSQL pool connections: open (total), idle, and callers waiting for one.",
    labelNames: ["state"],
    registers: [registry],
    collect() {
      this.reset();
      for (const state of ["total", "idle", "waiting"] as const) this.set({ state }, 0);
      for (const p of pools) {
        this.inc({ state: "total" }, p.totalCount);
        this.inc({ state: "idle" }, p.idleCount);
        this.inc({ state: "waiting" }, p.waitingCount);
      }
    },
  });
  const rpcInterceptor: Interceptor = (next) => async (req) => {
    const labels = { grpc_service: req.service.typeName, grpc_method: req.method.name, grpc_type: req.stream ? "stream" : "unary" };
    started.inc(labels);
    const end = seconds.startTimer(labels);
    try {
      const res = await next(req);
      if (!res.stream) {
        handled.inc({ ...labels, grpc_code: "OK" });
        end();
        return res;
      }
      // A server stream is handled when its last message was sent or it failed.
      const inner = res.message;
      async function* counted() {
        let code = "OK";
        try {
          yield* inner;
        } catch (err) {
          code = codeName(err);
          throw err;
        } finally {
          handled.inc({ ...labels, grpc_code: code });
          end();
        }
      }
      return { ...res, message: counted() };
    } catch (err) {
      handled.inc({ ...labels, grpc_code: codeName(err) });
      end();
      throw err;
    }
  };
  return {
    registry,
    rpcInterceptor,
    metric,
    observePool: (pool) => void pools.add(pool),
    natsStatus(type) {
      const m = natsMetrics();
      if (type === "connect") m.connected.set(1);
      else if (type === "reconnect") {
        m.reconnects.inc();
        m.connected.set(1);
      } else if (type === "disconnect" || type === "close") m.connected.set(0);
    },
  };
}

/** The gRPC status name of an error the chain threw (domain errors by their code, anything else UNKNOWN). */
function codeName(err: unknown): string {
  return grpcCodeName(codeOfError(err));
}

/** A running `/metrics` listener. */
export interface MetricsServer {
  readonly port: number;
  readonly url: string;
  close(): Promise<void>;
}

/**
 * Serves `GET /metrics` (Prometheus text format) on its own port, apart from the RPC listeners,
 * without authentication: it carries counts and durations only, never ids or names of tenants.
 * Anything else is 404. Port 0 picks a free port (tests).
 */
export async function startMetricsServer(o: { readonly host: string; readonly port: number; readonly metrics: Metrics; readonly log: Logger }): Promise<MetricsServer> {
  const server = http.createServer((req, res) => {
    const path = (req.url ?? "").split("?")[0];
    if (req.method !== "GET" || path !== "/metrics") {
      res.writeHead(404, { "content-type": "text/plain" }).end("only GET /metrics is served here\n");
      return;
    }
    o.metrics.registry.metrics().then(
      (text) => res.writeHead(200, { "content-type": o.metrics.registry.contentType }).end(text),
      (err: unknown) => {
        o.log.warn({ err }, "metrics collection failed");
        res.writeHead(500, { "content-type": "text/plain" }).end("metrics collection failed; see the service log\n");
      },
    );
  });
  server.keepAliveTimeout = 5000;
  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const port = (server.address() as AddressInfo).port;
  const host = o.host.includes(":") ? `[${o.host}]` : o.host;
  o.log.info({ metricsPort: port }, "metrics listening");
  return {
    port,
    url: `http://${host}:${port}/metrics`,
    close: () =>
      new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      }),
  };
}

/** The process's metrics with their `/metrics` listener on `host:port` (0 = a free port, logged). */
export async function serveProcessMetrics(log: Logger, host: string, port: number): Promise<{ readonly metrics: Metrics; readonly server: MetricsServer }> {
  const metrics = createMetrics();
  return { metrics, server: await startMetricsServer({ host, port, metrics, log }) };
}

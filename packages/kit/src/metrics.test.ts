import { createClient } from "@connectrpc/connect";
import { createGrpcTransport } from "@connectrpc/connect-node";
import { Health } from "@seraph/proto/grpc/health/v1/health_pb.js";
import { GoalService } from "@seraph/proto/seraph/api/v1/goals_pb.js";
import pino from "pino";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { UnauthenticatedError } from "./errors.js";
import { createMetrics, startMetricsServer, type Metrics, type MetricsServer } from "./metrics.js";
import { bootService, type BootedService } from "./service.js";
import { promSample as sample } from "../testing/index.js";

describe("process metrics", () => {
  const log = pino({ level: "silent" });
  let metrics: Metrics;
  let server: MetricsServer;
  let booted: BootedService;

  beforeAll(async () => {
    metrics = createMetrics();
    server = await startMetricsServer({ host: "127.0.0.1", port: 0, metrics, log });
    booted = await bootService({
      name: "metrics-test",
      log,
      host: "127.0.0.1",
      grpcPort: 0,
      serviceNames: [GoalService.typeName],
      // GoalService has no handlers: every call is refused by authentication before one (no token).
      routes: (router) => void router.service(GoalService, {}),
      authenticate: async () => {
        throw new UnauthenticatedError("no token");
      },
      prepare: async () => undefined,
      metrics,
    });
  });
  afterAll(async () => {
    await booted?.server.close(1000);
    await server?.close();
  });

  const scrape = async () => {
    const res = await fetch(server.url);
    expect(res.status).toBe(200);
    expect(res.headers.get("content-type")).toContain("text/plain");
    return res.text();
  };

  it("counts RPCs by service, method and gRPC status name, unary and streaming, and times them", async () => {
    const transport = createGrpcTransport({ baseUrl: booted.server.grpcUrl });
    const health = createClient(Health, transport);
    await health.check({ service: "" });
    await health.check({ service: "" });
    const goals = createClient(GoalService, transport);
    await expect(goals.listGoals({})).rejects.toThrow();
    // A server stream counts once it ends (here: its first answer, then the client cancels).
    const abort = new AbortController();
    for await (const _ of health.watch({ service: "" }, { signal: abort.signal })) {
      abort.abort();
      break;
    }
    await new Promise((r) => setTimeout(r, 100));
    const text = await scrape();
    expect(sample(text, "grpc_server_handled_total", { grpc_service: "grpc.health.v1.Health", grpc_method: "Check", grpc_code: "OK" })).toBe(2);
    expect(sample(text, "grpc_server_started_total", { grpc_service: "grpc.health.v1.Health", grpc_method: "Watch", grpc_type: "stream" })).toBe(1);
    expect(sample(text, "grpc_server_handled_total", { grpc_service: "seraph.api.v1.GoalService", grpc_method: "ListGoals", grpc_code: "UNAUTHENTICATED" })).toBe(1);
    expect(sample(text, "grpc_server_handling_seconds_count", { grpc_service: "grpc.health.v1.Health", grpc_method: "Check" })).toBe(2);
    // The Node.js defaults are there; no label carries an id.
    expect(sample(text, "process_resident_memory_bytes")).toBeGreaterThan(0);
    expect(text).not.toMatch(/job_id|repair_id|principal/);
  });

  it("tracks the NATS connection and pool connections it is told of", async () => {
    metrics.natsStatus("connect");
    metrics.natsStatus("disconnect");
    metrics.natsStatus("reconnect");
    metrics.observePool({ totalCount: 3, idleCount: 2, waitingCount: 1 });
    const text = await scrape();
    expect(sample(text, "seraph_nats_connected")).toBe(1);
    expect(sample(text, "seraph_nats_reconnects_total")).toBe(1);
    expect(sample(text, "seraph_db_pool_connections", { state: "total" })).toBe(3);
    expect(sample(text, "seraph_db_pool_connections", { state: "waiting" })).toBe(1);
    metrics.natsStatus("close");
    expect(sample(await scrape(), "seraph_nats_connected")).toBe(0);
  });

  it("serves only GET /metrics", async () => {
    const base = server.url.replace(/\/metrics$/, "");
    expect((await fetch(`${base}/`)).status).toBe(404);
    expect((await fetch(`${base}/metrics`, { method: "POST" })).status).toBe(404);
    expect((await fetch(`${base}/metrics?x=1`)).status).toBe(200);
  });
});

import { mkdtemp, rm } from "node:fs/promises";
import { tmpdir } from "node:os";
import { join } from "node:path";
import { connect, errors, type NatsConnection } from "@nats-io/transport-node";
import { createNatsSignals, createRootLogger, type Signals } from "@seraph/kit";
import { createTestDatabase, promSample } from "@seraph/kit/testing";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { spawnService, stopProcess, waitServing, type ServiceProcess } from "./harness/cluster.js";
import { startTestNats, type TestNatsServer } from "./harness/nats-server.js";
import { freePort } from "./harness/ports.js";

// A service that starts (or restarts, in a rolling restart) while NATS is down used to exit at
// once ("connection refused"), so a rolling restart during a NATS outage took the whole service
// down. Signals only wake waiters that also poll: the service must start on polling and attach
// its subscriptions (and the API its NATS operator service) once NATS is back. A server that is
// there and refuses the credentials still fails the start.
let nats: TestNatsServer;
let db: Awaited<ReturnType<typeof createTestDatabase>>;
let dir: string;
const processes: ServiceProcess[] = [];
const signals: Signals[] = [];
const conns: NatsConnection[] = [];
const log = createRootLogger({ name: "nats-late", level: "silent" });

beforeAll(async () => {
  nats = await startTestNats({ nodes: ["node-a"] });
  db = await createTestDatabase();
  dir = await mkdtemp(join(tmpdir(), "seraph-nats-late-"));
});

afterAll(async () => {
  for (const p of processes) await stopProcess(p.child);
  for (const s of signals) await s.close().catch(() => undefined);
  for (const c of conns) await c.close().catch(() => undefined);
  await nats?.close();
  await db?.drop();
  if (dir) await rm(dir, { recursive: true, force: true });
});

async function until(cond: () => boolean | Promise<boolean>, ms: number): Promise<boolean> {
  const deadline = Date.now() + ms;
  while (Date.now() < deadline) {
    if (await cond()) return true;
    await new Promise((r) => setTimeout(r, 50));
  }
  return cond();
}

describe("a service started while NATS is down", () => {
  it("signals start detached, then attach their subscriptions once NATS is reachable; wrong credentials still fail the start", async () => {
    await nats.stop();
    const s = await createNatsSignals(nats.url, "seraph-jobs", log, nats.users.jobs, { retryMs: 100 });
    signals.push(s);
    expect(s.nats).toBeUndefined();
    const got: string[] = [];
    s.subscribe("seraph.work.queued", (m) => got.push(new TextDecoder().decode(m.data)), { queue: "seraph-jobs" });
    let connectedCb = 0;
    s.whenConnected?.(() => connectedCb++);
    // Publishing while detached is dropped, never thrown.
    s.publish("seraph.work.queued", new TextEncoder().encode("lost"));
    await nats.start();
    expect(await until(() => s.nats !== undefined, 20_000)).toBe(true);
    expect(connectedCb).toBe(1);
    // Another jobs replica (the user that may publish seraph.work.queued).
    const peer = await connect({ servers: nats.url, user: nats.users.jobs.user, pass: nats.users.jobs.password });
    conns.push(peer);
    // The subscription was attached on connect: a message published now reaches it.
    expect(await until(async () => {
      peer.publish("seraph.work.queued", new TextEncoder().encode("after"));
      await peer.flush();
      await new Promise((r) => setTimeout(r, 100));
      return got.includes("after");
    }, 10_000)).toBe(true);
    expect(got).not.toContain("lost");
    // A server that is there and refuses: the start fails (no silent background retry).
    await expect(createNatsSignals(nats.url, "seraph-jobs", log, { user: nats.users.jobs.user, password: "wrong" })).rejects.toBeInstanceOf(errors.AuthorizationError);
  });

  it("jobs and api processes reach SERVING with NATS down; once it is up, the API's NATS operator service answers $SRV.PING", async () => {
    await nats.stop();
    const [jg, jh, ag, ah, jm] = await Promise.all([freePort(), freePort(), freePort(), freePort(), freePort()]);
    const common = { DATABASE_URL: db.url, SERAPH_INTERNAL_TOKEN: "t".repeat(64) };
    const jobs = spawnService("jobs", "jobs", { ...common, ...nats.env("jobs"), SERAPH_JOBS_GRPC_PORT: `${jg}`, SERAPH_JOBS_HTTP_PORT: `${jh}`, SERAPH_JOBS_METRICS_PORT: `${jm}` }, dir, jg!, jh!);
    processes.push(jobs);
    const api = spawnService(
      "api",
      "api",
      { ...common, SERAPH_EXECUTOR_TOKEN: "e".repeat(64), ...nats.env("api"), SERAPH_API_GRPC_PORT: `${ag}`, SERAPH_API_HTTP_PORT: `${ah}`, SERAPH_JOBS_URL: jobs.grpcUrl, SERAPH_OPERATOR_TOKEN_FILE: join(dir, "operator-token") },
      dir,
      ag!,
      ah!,
    );
    processes.push(api);
    await Promise.all([waitServing(jobs), waitServing(api)]);
    // The jobs process's /metrics says NATS is down, then up (cluster mode's NATS series).
    const natsConnected = async () => promSample(await (await fetch(`http://127.0.0.1:${jm}/metrics`)).text(), "seraph_nats_connected");
    expect(await natsConnected()).toBe(0);
    await nats.start();
    expect(await until(async () => (await natsConnected()) === 1, 20_000)).toBe(true);
    const ops = await connect({ servers: nats.url, user: nats.users.ops.user, pass: nats.users.ops.password });
    conns.push(ops);
    const answered = await until(async () => {
      try {
        const m = await ops.request("$SRV.PING.seraph-operator", new Uint8Array(), { timeout: 1000 });
        return (JSON.parse(new TextDecoder().decode(m.data)) as { name?: string }).name === "seraph-operator";
      } catch {
        return false;
      }
    }, 30_000);
    expect(answered).toBe(true);
    expect(jobs.child.exitCode).toBeNull();
    expect(api.child.exitCode).toBeNull();
  }, 120_000);
});

import { readFileSync } from "node:fs";
import { connect, errors, type NatsConnection } from "@nats-io/transport-node";
import { main, type CliIo } from "@seraph/cli";
import { ConfigError, createNatsSignals, createRootLogger } from "@seraph/kit";
import { loadApiConfig } from "@seraph/api";
import { loadExecutorConfig } from "@seraph/executor-linux";
import { loadJobsConfig } from "@seraph/jobs";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { startOperatorModeNats, startTestNats, type NatsCredentials, type TestNatsServer } from "./harness/nats-server.js";

// NATS is an authenticated plane. The attack: with the shared no-auth server anyone could
// connect, read seraph.> and send operator requests. Here the server runs with the config the
// harness (and a deployment) uses, rendered from kit's per-service permission table.
let nats: TestNatsServer;
const open: NatsConnection[] = [];

async function as(c: NatsCredentials | undefined): Promise<NatsConnection> {
  const nc = await connect({ servers: nats.url, timeout: 5000, reconnect: false, ...(c ? { user: c.user, pass: c.password } : {}) });
  open.push(nc);
  return nc;
}

/** Resolves to the error a subscription closed with (undefined when it stays open for `ms`). */
async function subscribeError(nc: NatsConnection, subject: string, ms = 2000): Promise<Error | undefined> {
  const sub = nc.subscribe(subject);
  await nc.flush();
  const res = await Promise.race([sub.closed, new Promise<"open">((r) => setTimeout(() => r("open"), ms))]);
  if (res === "open") {
    sub.unsubscribe();
    return undefined;
  }
  return res ?? undefined;
}

/** True when a message `from` publishes on `subject` reaches a subscriber with read permission. */
async function delivered(from: NatsConnection, reader: NatsConnection, subject: string): Promise<boolean> {
  const sub = reader.subscribe(subject, { max: 1 });
  await reader.flush();
  const got = (async () => {
    for await (const _ of sub) return true;
    return false;
  })();
  from.publish(subject, new Uint8Array([1]));
  await from.flush().catch(() => undefined);
  const res = await Promise.race([got, new Promise<boolean>((r) => setTimeout(() => r(false), 1500))]);
  sub.unsubscribe();
  return res;
}

beforeAll(async () => {
  nats = await startTestNats({ nodes: ["node-a", "node-b"] });
});

afterAll(async () => {
  for (const nc of open) await nc.close().catch(() => undefined);
  await nats?.close();
});

describe("NATS authentication and per-service permissions", () => {
  it("refuses an anonymous connection and a wrong password", async () => {
    await expect(as(undefined)).rejects.toBeInstanceOf(errors.AuthorizationError);
    await expect(as({ user: nats.users.api.user, password: "not-the-password" })).rejects.toBeInstanceOf(errors.AuthorizationError);
    // The right password is accepted (so the refusals above are about the credentials).
    const ok = await as(nats.users.api);
    await ok.flush();
    expect(ok.isClosed()).toBe(false);
  });

  it("an executor hears only its own node's subjects and may publish nothing", async () => {
    const a = await as(nats.executor("node-a"));
    expect(await subscribeError(a, "seraph.nodes.node-a.work")).toBeUndefined();
    expect(await subscribeError(a, "seraph.nodes.node-b.cancel")).toBeInstanceOf(errors.PermissionViolationError);
    expect(await subscribeError(a, "seraph.jobs.*.state")).toBeInstanceOf(errors.PermissionViolationError);
    const reader = await as(nats.users.observer);
    expect(await delivered(a, reader, "seraph.jobs.x.state")).toBe(false);
  });

  it("operator tooling may reach the operator services but read no events; the jobs user may not serve operator requests", async () => {
    const ops = await as(nats.users.ops);
    expect(await subscribeError(ops, "seraph.jobs.>")).toBeInstanceOf(errors.PermissionViolationError);
    expect(await subscribeError(ops, "seraph.operator.cancel")).toBeInstanceOf(errors.PermissionViolationError);
    const jobs = await as(nats.users.jobs);
    expect(await subscribeError(jobs, "seraph.operator.cancel")).toBeInstanceOf(errors.PermissionViolationError);
    expect(await subscribeError(jobs, "$SRV.INFO")).toBeInstanceOf(errors.PermissionViolationError);
    // The jobs user publishes job events, which a reader with read permission receives...
    const reader = await as(nats.users.observer);
    expect(await delivered(jobs, reader, "seraph.jobs.x.state")).toBe(true);
    // ...but cannot forge repair events (only the API publishes those).
    expect(await delivered(jobs, reader, "seraph.repairs.x.state")).toBe(false);
  });

  it("only the API publishes and hears token revocations (seraph.tokens.<id>.revoked ends the token's streams on every replica)", async () => {
    const api = await as(nats.users.api);
    const other = await as(nats.users.api);
    expect(await delivered(api, other, "seraph.tokens.t1.revoked")).toBe(true);
    // Nobody else can end another principal's streams with a forged revocation.
    for (const who of [nats.users.jobs, nats.users.ops, nats.executor("node-a")]) {
      expect(await delivered(await as(who), other, "seraph.tokens.t1.revoked")).toBe(false);
    }
    expect(await subscribeError(await as(nats.users.ops), "seraph.tokens.*.revoked")).toBeInstanceOf(errors.PermissionViolationError);
  });

  it(".ci/run starts no nats-server of its own (it started one on 4222 that accepted anonymous clients)", () => {
    const script = readFileSync(new URL("../.ci/run", import.meta.url), "utf8");
    const starts = script.split("\n").filter((l) => !l.trimStart().startsWith("#") && /nats-server/.test(l) && !/apt_install|--version|-x \/usr\/sbin\/nats-server/.test(l));
    expect(starts).toEqual([]);
  });

  it("every cluster service refuses to start without NATS credentials, naming the variables", () => {
    const common = { DATABASE_URL: "postgres://x", NATS_URL: "nats://127.0.0.1:1", SERAPH_EXECUTOR_DATA_DIR: "/tmp/x" };
    // The API holds both of its credentials, jobs the API's, an executor node only the executor token.
    const cases = [
      [loadApiConfig, { ...common, SERAPH_INTERNAL_TOKEN: "t", SERAPH_EXECUTOR_TOKEN: "e" }],
      [loadJobsConfig, { ...common, SERAPH_INTERNAL_TOKEN: "t" }],
      [loadExecutorConfig, { ...common, SERAPH_EXECUTOR_TOKEN: "e" }],
    ] as const;
    for (const [load, base] of cases) {
      expect(() => load(base)).toThrowError(ConfigError);
      expect(() => load(base)).toThrowError(/NATS_USER and NATS_PASSWORD \(or NATS_CREDS_FILE\) are required/);
      expect(() => load({ ...base, NATS_USER: "u" })).toThrowError(/NATS_PASSWORD is required with NATS_USER/);
      expect(() => load({ ...base, NATS_USER: "u", NATS_PASSWORD: "p", NATS_CREDS_FILE: "/c" })).toThrowError(/not both/);
      expect(load({ ...base, NATS_USER: "u", NATS_PASSWORD: "p" }).NATS_AUTH).toEqual({ user: "u", password: "p" });
      expect(load({ ...base, NATS_CREDS_FILE: "/etc/seraph/nats.creds" }).NATS_AUTH).toEqual({ credsFile: "/etc/seraph/nats.creds" });
    }
  });

  it("a creds file (operator-mode server) authenticates a service and seraph ops --creds; anonymous is refused there too", async () => {
    const op = await startOperatorModeNats();
    try {
      await expect(connect({ servers: op.url, timeout: 5000, reconnect: false })).rejects.toBeInstanceOf(errors.AuthorizationError);
      const log = createRootLogger({ name: "creds-test", level: "silent" });
      const jobs = await createNatsSignals(op.url, "seraph-jobs", log, { credsFile: await op.credsFile("jobs") });
      try {
        // The jobs user both publishes and hears the scheduler's wake-up subject.
        const heard = new Promise<string>((resolve) => jobs.subscribe("seraph.work.queued", (m) => resolve(m.subject)));
        await jobs.nats!.flush();
        jobs.publish("seraph.work.queued", new Uint8Array());
        expect(await heard).toBe("seraph.work.queued");
        // The JWT's permissions hold: the jobs user may not serve operator requests.
        expect(await subscribeError(jobs.nats!, "seraph.operator.cancel")).toBeInstanceOf(errors.PermissionViolationError);
      } finally {
        await jobs.close();
      }
      let err = "";
      const io: CliIo = { env: { SERAPH_CONFIG_DIR: "/nonexistent/seraph-cli" }, stdout: { write: () => true }, stderr: { write: (x: string) => (err += x) }, stdinIsTTY: false, home: "/nonexistent", readLine: async () => "" };
      const code = await main(["ops", "status", "--nats", op.url, "--creds", await op.credsFile("ops"), "--token", "sk_a-token-nobody-checks-here-000"], io);
      // Connected and authorized to send: nothing serves seraph.operator.* on this server.
      expect([code, err]).toEqual([1, "seraph ops status: no operator service answers on seraph.operator.status: is the API running in cluster mode on this NATS?\n"]);
    } finally {
      await op.close();
    }
  });
});
